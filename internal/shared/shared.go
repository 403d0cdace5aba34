// Package shared lets many objects of a host share one copy of a
// configuration they would otherwise each copy: a host runs thousands of
// raft groups whose nodes and transports are configured alike (see
// "Memory of an idle group" in docs/architecture.md).
//
// A Set keeps a few configurations, each given by its first user; Share
// returns the one equal to what it is given, or keeps that one. Shared
// configurations are never modified: their users only read them.
package shared

import (
	"reflect"
	"sync"
)

// MaxKept bounds the configurations a Set keeps: a host whose groups are
// configured in more ways than that shares the first ones only (each
// further group keeps its own copy, as without a Set).
const MaxKept = 16

// Set is a host's shared configurations of type T. The zero Set is ready
// to use; it is safe for concurrent use.
type Set[T any] struct {
	mu   sync.Mutex
	kept []*T
}

// Share returns a kept configuration equal to *c (Equal), or keeps c and
// returns it. The caller must not modify *c afterwards, nor what Share
// returns.
func (s *Set[T]) Share(c *T) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.kept {
		if Equal(k, c) {
			return k
		}
	}
	if len(s.kept) < MaxKept {
		s.kept = append(s.kept, c)
	}
	return c
}

// Len returns the number of configurations kept.
func (s *Set[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kept)
}

// Equal reports whether *a and *b may stand for each other: values (numbers,
// strings, booleans, arrays, structs, and slices and maps of them) are
// compared by content, but what refers to an object — a pointer, a channel,
// a non-nil function, an interface holding a pointer — only by identity,
// so that two groups never share a logger, a policy or a handler that is
// not the same one. Two non-nil functions are never equal (Go cannot
// compare them).
func Equal[T any](a, b *T) bool {
	return equal(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem())
}

func equal(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	case reflect.Pointer, reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	case reflect.Func:
		return a.IsNil() && b.IsNil()
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equal(a.Elem(), b.Elem())
	case reflect.Array:
		for i := range a.Len() {
			if !equal(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equal(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			v := b.MapIndex(it.Key())
			if !v.IsValid() || !equal(it.Value(), v) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := range a.NumField() {
			if !equal(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return false // a kind Go may add: not shared
}
