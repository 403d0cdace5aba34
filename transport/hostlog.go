package transport

import (
	"log/slog"
	"sync"
	"time"
)

// A host of many groups sees most events once per group: a peer host that
// restarts refuses every group's attachment until it runs them, and every
// group would log it. The groups of a shared mux log such events through
// hostLog instead, per peer host and reason: at warning level at most once
// per refusalLogInterval, with the number of events the previous warning
// stood for; at debug level otherwise. Stats count every one.

// maxHostLogKeys bounds hostLog's memory: its keys include host IDs that
// peers only claim.
const maxHostLogKeys = 1024

// hostLog rate-limits and aggregates the groups' log lines per peer host.
type hostLog struct {
	mu   sync.Mutex
	keys map[hostLogKey]*hostLogEntry
}

type hostLogKey struct{ host, reason string }

type hostLogEntry struct {
	at         time.Time // the last warning
	suppressed int       // events logged at debug level since
}

// log logs msg for peer host host (its address, or its host ID) and
// reason: at warning level if none was logged in the last
// refusalLogInterval, else at debug level.
func (hl *hostLog) log(l *slog.Logger, host, reason, msg string, args ...any) {
	now := time.Now()
	k := hostLogKey{host, reason}
	hl.mu.Lock()
	e := hl.keys[k]
	if e != nil && now.Sub(e.at) < refusalLogInterval {
		e.suppressed++
		hl.mu.Unlock()
		l.Debug(msg, args...)
		return
	}
	if hl.keys == nil {
		hl.keys = make(map[hostLogKey]*hostLogEntry)
	}
	if e == nil && len(hl.keys) >= maxHostLogKeys {
		for k, e := range hl.keys {
			if now.Sub(e.at) >= refusalLogInterval {
				delete(hl.keys, k)
			}
		}
		if len(hl.keys) >= maxHostLogKeys {
			hl.mu.Unlock()
			l.Debug(msg, args...)
			return
		}
	}
	n := 0
	if e != nil {
		n = e.suppressed
	}
	hl.keys[k] = &hostLogEntry{at: now}
	hl.mu.Unlock()
	args = append(args, "peer_host", host, "reason", reason)
	if n > 0 {
		args = append(args, "more_since_last_warning", n)
	}
	l.Warn(msg, args...)
}
