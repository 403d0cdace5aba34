package main

import (
	"fmt"
	"log"
	"os"

	"github.com/lni/dragonboat/v4/logger"
)

// logLevels are -log's values.
var logLevels = map[string]logger.LogLevel{
	"debug":   logger.DEBUG,
	"info":    logger.INFO,
	"warning": logger.WARNING,
	"error":   logger.ERROR,
}

// setLogger sends dragonboat's logs to stderr at level, or nowhere if level
// is empty (by default dragonboat logs every start, election and quiesce
// at INFO to stderr). Called once: dragonboat's SetLoggerFactory panics on
// a second call.
func setLogger(level string) {
	l, ok := logLevels[level]
	if !ok {
		l = logger.CRITICAL - 1 // nothing
	}
	std := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	logger.SetLoggerFactory(func(pkg string) logger.ILogger {
		return &stderrLogger{pkg: pkg, level: l, std: std}
	})
}

// stderrLogger is a dragonboat ILogger writing to std at its level and
// above (a lower LogLevel is more severe).
type stderrLogger struct {
	pkg   string
	level logger.LogLevel
	std   *log.Logger
}

func (s *stderrLogger) SetLevel(logger.LogLevel) {} // -log decides

func (s *stderrLogger) logf(l logger.LogLevel, tag, format string, args ...any) {
	if l <= s.level {
		s.std.Printf("%s %s: %s", tag, s.pkg, fmt.Sprintf(format, args...))
	}
}

func (s *stderrLogger) Debugf(format string, args ...any) {
	s.logf(logger.DEBUG, "D", format, args...)
}

func (s *stderrLogger) Infof(format string, args ...any) {
	s.logf(logger.INFO, "I", format, args...)
}

func (s *stderrLogger) Warningf(format string, args ...any) {
	s.logf(logger.WARNING, "W", format, args...)
}

func (s *stderrLogger) Errorf(format string, args ...any) {
	s.logf(logger.ERROR, "E", format, args...)
}

// Panicf logs at any level and panics, as dragonboat's own loggers do.
func (s *stderrLogger) Panicf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.std.Printf("P %s: %s", s.pkg, msg)
	panic(msg)
}
