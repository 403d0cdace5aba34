//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts a server in its own process group (stopped as a group).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
