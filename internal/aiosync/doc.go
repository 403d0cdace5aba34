// Package aiosync flushes files to disk without holding a Go processor
// while the disk works.
//
// A goroutine in a blocking system call keeps its processor (its P) until
// the runtime's monitor thread notices and hands the P to another thread,
// which can take up to several milliseconds when the monitor has been
// sleeping. An fsync takes about a millisecond on a good disk: a process
// with several storage engines (a host of many raft groups, three hosts in
// a test) had about one of its two Ps held by fdatasync at 100 groups, its
// run queue full and a third of the machine idle (docs/architecture.md,
// "An fsync holds no processor").
//
// On Linux, Data and Full submit the flush through Linux AIO
// (IOCB_CMD_FDSYNC and IOCB_CMD_FSYNC, Linux 4.18 and later, executed by a
// kernel worker, with the same guarantees as fdatasync(2) and fsync(2)) and
// wait on a channel; one goroutine per process waits for completions on an
// eventfd through the runtime's network poller. Neither holds a P while the
// disk works. Where AIO cannot serve a flush — another operating system, a
// kernel or sandbox without AIO (io_setup refused, as seccomp profiles
// may), a file system without AIO fsync, more flushes in flight than the
// context holds — the flush runs as the plain system call the caller
// passes (fallback), with that call's result.
package aiosync
