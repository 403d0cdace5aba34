package raft

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	etcdraft "go.etcd.io/raft/v3"
)

// raftLogger adapts a *slog.Logger to etcd raft's Logger. It is passed through
// etcdraft.Config.Logger, never installed globally, so two nodes in one process
// keep their own loggers. Fatal and Panic log at error level and then panic:
// etcd raft expects them not to return. The run loop recovers the panic and
// stops the node with the message as its error.
type raftLogger struct{ l *slog.Logger }

var _ etcdraft.Logger = raftLogger{}

func (r raftLogger) log(level slog.Level, msg string) {
	r.l.Log(context.Background(), level, msg, slog.String("component", "etcd-raft"))
}

func (r raftLogger) enabled(level slog.Level) bool {
	return r.l.Enabled(context.Background(), level)
}

func (r raftLogger) Debug(v ...any) {
	if r.enabled(slog.LevelDebug) {
		r.log(slog.LevelDebug, fmt.Sprint(v...))
	}
}

func (r raftLogger) Debugf(format string, v ...any) {
	if r.enabled(slog.LevelDebug) {
		r.log(slog.LevelDebug, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Info(v ...any) {
	if r.enabled(slog.LevelInfo) {
		r.log(slog.LevelInfo, fmt.Sprint(v...))
	}
}

func (r raftLogger) Infof(format string, v ...any) {
	level := slog.LevelInfo
	if chatter(format) {
		level = slog.LevelDebug
	}
	if r.enabled(level) {
		r.log(level, fmt.Sprintf(format, v...))
	}
}

// chatter reports whether an etcd raft Info message is harmless noise that
// floods the log under normal operation (thousands a minute with
// asynchronous storage writes): it is logged at Debug instead.
func chatter(format string) bool {
	for _, prefix := range chatterFormats {
		if strings.HasPrefix(format, prefix) {
			return true
		}
	}
	return false
}

// chatterFormats are the etcd raft v3.7 Infof formats demoted to Debug.
var chatterFormats = []string{
	"entry at index %d missing from unstable log; ignoring",
	"entry at index %d matched unstable snapshot; ignoring",
	"%x [logterm: %d, index: %d, vote: %x] ignored %s from %x [logterm: %d, index: %d] at term %d: lease is not expired",
}

func (r raftLogger) Warning(v ...any) { r.log(slog.LevelWarn, fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.log(slog.LevelWarn, fmt.Sprintf(format, v...))
}
func (r raftLogger) Error(v ...any) { r.log(slog.LevelError, fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) {
	r.log(slog.LevelError, fmt.Sprintf(format, v...))
}

func (r raftLogger) Fatal(v ...any) { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any) {
	r.Panicf(format, v...)
}

func (r raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	r.log(slog.LevelError, msg)
	panic(raftPanic(msg))
}

func (r raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	r.log(slog.LevelError, msg)
	panic(raftPanic(msg))
}

// raftPanic is the value etcd raft's Panic/Fatal calls panic with.
type raftPanic string

func (p raftPanic) Error() string { return string(p) }
