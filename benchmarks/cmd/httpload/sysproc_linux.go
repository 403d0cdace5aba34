package main

import "syscall"

// sysProcAttr puts a server in its own process group (stopped as a group)
// and kills it if httpload dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
