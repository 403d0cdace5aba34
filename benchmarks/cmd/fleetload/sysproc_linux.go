package main

import "syscall"

// sysProcAttr kills a member process if fleetload dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
