package raft

import (
	"cmp"
	"slices"
	"time"
)

// contacts are when this member last heard from each other member, by
// ID: a sorted list, binary searched (a group has a handful of members; a
// map cost each of a host's many replicas 288 bytes).
type contacts []contact

type contact struct {
	id uint64
	at time.Time
}

func (c contacts) find(id uint64) (int, bool) {
	return slices.BinarySearchFunc(c, id, func(e contact, id uint64) int { return cmp.Compare(e.id, id) })
}

// get returns when member id was last heard from (zero: never).
func (c contacts) get(id uint64) time.Time {
	if i, ok := c.find(id); ok {
		return c[i].at
	}
	return time.Time{}
}

// set records that member id was heard from at at.
func (c *contacts) set(id uint64, at time.Time) {
	i, ok := c.find(id)
	if !ok {
		*c = slices.Insert(*c, i, contact{id: id})
	}
	(*c)[i].at = at
}
