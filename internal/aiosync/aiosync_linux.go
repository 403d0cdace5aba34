//go:build linux && (amd64 || arm64)

package aiosync

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux AIO's ABI (linux/aio_abi.h).
const (
	cmdFsync      = 2 // IOCB_CMD_FSYNC
	cmdFdsync     = 3 // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 // IOCB_FLAG_RESFD: signal aio_resfd (an eventfd) on completion
)

// iocb is struct iocb. aio_key and aio_rw_flags swap places on big-endian
// machines; both are zero here.
type iocb struct {
	data   uint64    // aio_data: the slot
	_      [2]uint32 // aio_key, aio_rw_flags
	opcode uint16    // aio_lio_opcode
	_      int16     // aio_reqprio
	fildes uint32    // aio_fildes
	_      [4]uint64 // aio_buf, aio_nbytes, aio_offset, aio_reserved2
	flags  uint32    // aio_flags
	resfd  uint32    // aio_resfd
}

// ioEvent is struct io_event.
type ioEvent struct {
	data uint64 // the iocb's aio_data
	_    uint64 // obj
	res  int64  // the flush's result: 0, or a negated errno
	_    int64  // res2
}

// slots is how many flushes the context holds in flight; more at once wait
// in the plain system call.
const slots = 64

// slot is one flush in flight: its control block (read by io_submit; on
// the heap, so it does not move), where its result is handed, and its
// waiter's timer and completions buffer (wait).
type slot struct {
	cb    iocb
	ptr   *iocb
	done  chan int64
	timer *time.Timer
	evs   [8]ioEvent
}

// pollEvery is how often a flush's waiter looks for completions itself
// while it waits (wait).
const pollEvery = time.Millisecond

// aioCtx is the process's AIO context and its completions' eventfd.
type aioCtx struct {
	id   uintptr  // aio_context_t
	efd  int      // the eventfd's descriptor
	ev   *os.File // the same eventfd, read through the network poller
	off  atomic.Bool
	mu   sync.Mutex
	free []int // slots not in flight
	slot [slots]slot
}

var (
	once sync.Once
	proc *aioCtx // nil when AIO is not available
)

func get() *aioCtx {
	once.Do(func() { proc = setup() })
	return proc
}

// setup makes the context, or returns nil if the kernel refuses it.
func setup() *aioCtx {
	var id uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 2*slots, uintptr(unsafe.Pointer(&id)), 0); e != 0 {
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Syscall(unix.SYS_IO_DESTROY, id, 0, 0) //nolint:errcheck // nothing was submitted
		return nil
	}
	c := &aioCtx{id: id, efd: efd, ev: os.NewFile(uintptr(efd), "aiosync-eventfd"), free: make([]int, 0, slots)}
	for i := range c.slot {
		c.slot[i].ptr = &c.slot[i].cb
		c.slot[i].done = make(chan int64, 1)
		c.slot[i].timer = time.NewTimer(time.Hour)
		c.slot[i].timer.Stop()
		c.free = append(c.free, i)
	}
	go c.reap()
	return c
}

// Available reports whether flushes go through AIO: the kernel gave the
// process a context and has not refused a flush.
func Available() bool {
	c := get()
	return c != nil && !c.off.Load()
}

// Data flushes the data of the open file fd as fdatasync(2) does, through
// AIO; where AIO cannot, it returns fallback() (the plain system call,
// e.g. a vfs.File's SyncData).
func Data(fd uintptr, fallback func() error) error { return flush(fd, cmdFdsync, fallback) }

// Full flushes the open file fd as fsync(2) does, through AIO; where AIO
// cannot, it returns fallback() (the plain system call).
func Full(fd uintptr, fallback func() error) error { return flush(fd, cmdFsync, fallback) }

func flush(fd uintptr, op uint16, fallback func() error) error {
	c := get()
	if c == nil || c.off.Load() || fd > 1<<31-1 {
		return fallbackSync(fallback)
	}
	i, ok := c.take()
	if !ok {
		return fallbackSync(fallback)
	}
	s := &c.slot[i]
	s.cb = iocb{data: uint64(i), opcode: op, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(c.efd)}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, c.id, 1, uintptr(unsafe.Pointer(&s.ptr)))
	if e != 0 || n != 1 {
		c.put(i)
		if e == unix.EINVAL {
			// The file system has no AIO fsync (or the kernel predates
			// it): plain system calls from now on.
			c.off.Store(true)
		}
		return fallbackSync(fallback)
	}
	res := c.wait(s)
	c.put(i)
	viaAIO.Add(1)
	if res < 0 {
		return syscall.Errno(-res)
	}
	return nil
}

// wait returns s's result. The reaper hands it over as soon as the
// runtime polls the eventfd — at once while a processor is idle, but on a
// process whose processors are all busy only when the runtime's monitor
// polls, up to 10 ms later. So the waiter also looks every pollEvery
// (io_getevents without waiting, a few microseconds): a timer's goroutine
// runs next on the processor whose timer fired, busy or not.
func (c *aioCtx) wait(s *slot) int64 {
	select {
	case res := <-s.done:
		return res
	default:
	}
	zero := unix.Timespec{}
	for {
		s.timer.Reset(pollEvery)
		select {
		case res := <-s.done:
			s.timer.Stop()
			return res
		case <-s.timer.C:
			c.complete(s.evs[:], 0, &zero)
		}
	}
}

func (c *aioCtx) take() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free) == 0 {
		return 0, false
	}
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	return i, true
}

func (c *aioCtx) put(i int) {
	c.mu.Lock()
	c.free = append(c.free, i)
	c.mu.Unlock()
}

// reap hands each completion to its flush's waiter. It waits on the
// eventfd through the network poller (holding no P), then takes every
// completion ready without waiting.
func (c *aioCtx) reap() {
	var buf [8]byte
	var evs [slots]ioEvent
	var zero unix.Timespec
	for {
		if _, err := c.ev.Read(buf[:]); err != nil {
			// Not expected of an open eventfd. Flushes from now on are
			// plain system calls; those in flight complete by waiting in
			// io_getevents itself.
			c.off.Store(true)
			for c.inFlight() > 0 && c.complete(evs[:], 1, nil) {
			}
			return
		}
		for c.complete(evs[:], 0, &zero) {
		}
	}
}

// complete hands the completions io_getevents returns (at least minNr,
// waiting up to timeout; nil: for good) to their waiters, and reports
// whether it found any.
func (c *aioCtx) complete(evs []ioEvent, minNr uintptr, timeout *unix.Timespec) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, c.id, minNr, uintptr(len(evs)),
			uintptr(unsafe.Pointer(&evs[0])), uintptr(unsafe.Pointer(timeout)), 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n == 0 {
			return false
		}
		for _, ev := range evs[:n] {
			if ev.data < slots {
				c.slot[ev.data].done <- ev.res
			}
		}
		if int(n) < len(evs) || minNr != 0 {
			return true
		}
		minNr = 0 // more may be ready: take them too, without waiting
	}
}

// inFlight counts the flushes submitted and not completed.
func (c *aioCtx) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slots - len(c.free)
}
