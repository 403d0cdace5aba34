// Package aiosync flushes files to disk without holding a Go processor
// while the disk works.
//
// A goroutine in a blocking system call keeps its processor (its P) until
// the runtime's monitor thread hands it to another thread, and when the
// call returns it waits for a P again, behind every goroutine runnable.
// Three storage engines in one process on 2 cores (groupload's hosts at
// 100 groups) had a third of the machine idle while goroutines waited for
// a P (docs/architecture.md, "Parked fsyncs").
//
// On Linux, Data and Full submit the flush through Linux AIO
// (IOCB_CMD_FDSYNC and IOCB_CMD_FSYNC, Linux 4.18 and later, executed by a
// kernel worker, with the same guarantees as fdatasync(2) and fsync(2)) and
// wait on a channel; one goroutine per process (started with the first
// flush, for the process's lifetime: leak checks ignore
// aiosync.(*aioCtx).reap) waits for completions on an eventfd through the
// runtime's network poller. Neither holds a P while the
// disk works. Where AIO cannot serve a flush — another operating system, a
// kernel or sandbox without AIO (io_setup refused, as seccomp profiles
// may), a file system without AIO fsync, more flushes in flight than the
// context holds — the flush runs as the plain system call the caller
// passes (fallback), with that call's result.
//
// The price: the kernel worker that makes the flush waits for a CPU like
// any thread, so on a busy machine a flush takes longer than the same
// system call made by the thread that waits for it. storage makes its
// use an option (storage.EngineOptions.ParkedSync).
package aiosync
