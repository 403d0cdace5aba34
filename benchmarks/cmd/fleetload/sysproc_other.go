//go:build !linux

package main

import "syscall"

// sysProcAttr: nothing outside Linux (no parent-death signal there).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
