package raft

import (
	"testing"

	"github.com/understudy-raft/understudy/internal/wire"
)

// protocolContents is what members of each protocol version (wire.Version)
// may hand each other: members refuse a peer of another version at the
// hello, so an older member never meets an entry kind, a snapshot header
// or a request op it does not know. A version, once released, is frozen.
var protocolContents = map[uint16]struct {
	maxEntryKind byte
	snapMagic    string
	rpcVersion   int
}{
	2: {maxEntryKind: entryRegisterClient, snapMagic: "USN5", rpcVersion: 1},
	// 3: member records carry an incarnation (a confchange.Context flag a
	// member of version 2 refuses as a corrupt entry); the refusal
	// CodeWiped.
	3: {maxEntryKind: entryRegisterClient, snapMagic: "USN5", rpcVersion: 1},
	// 4: the TypeRelay frame on host links (relay envelopes: Config.Relay).
	4: {maxEntryKind: entryRegisterClient, snapMagic: "USN5", rpcVersion: 1},
	// 5: relayed standbys' answers in TypeRelay frames, and the relay's
	// TakesAnswers flag.
	5: {maxEntryKind: entryRegisterClient, snapMagic: "USN5", rpcVersion: 1},
	// 6: delta-coded headers in TypeRelay frames.
	6: {maxEntryKind: entryRegisterClient, snapMagic: "USN5", rpcVersion: 1},
}

// TestProtocolVersionCoversWhatMembersExchange is a tripwire: a new entry
// kind, snapshot header version or request version must come with a new
// wire.Version (and a row above), or members of two builds would meet what
// one of them cannot apply.
func TestProtocolVersionCoversWhatMembersExchange(t *testing.T) {
	want, ok := protocolContents[wire.Version]
	if !ok {
		t.Fatalf("protocol version %d has no row in protocolContents: add one", wire.Version)
	}
	if want.maxEntryKind != maxEntryKindKnown || want.snapMagic != snapMagic || want.rpcVersion != peerRPCVersion {
		t.Fatalf("protocol version %d covers entry kinds up to %d, snapshot header %q and requests v%d; this build has %d, %q and v%d: bump wire.Version and add a row",
			wire.Version, want.maxEntryKind, want.snapMagic, want.rpcVersion, maxEntryKindKnown, snapMagic, peerRPCVersion)
	}
}
