package understudy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// This file holds what concerns a data dir and a cluster's identity
// outside a running member: does a data dir hold a member, the ID of a new
// cluster, parsing a member list, disaster recovery and restoring a backup.

// holdsMember reports whether store holds a member's raft state (a log, a
// hard state or a snapshot). An identity alone is not one: it is a
// bootstrap or a join that stopped before its first write, which Start
// runs again (under the same identity).
func holdsMember(store *storage.Store) (bool, error) {
	hs, _, err := store.InitialState()
	if err != nil {
		return false, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return false, err
	}
	return last > 0 || !etcdraft.IsEmptyHardState(hs), nil
}

// HasMember reports whether the data dir dir holds a member, so that a host
// ignores its bootstrap settings on a restart (as etcd does). A data dir that
// does not exist holds none, nor does one where a bootstrap or a join
// stopped before its first write (only the identity is recorded: Start
// bootstraps or joins again, refusing another member ID or cluster). It
// opens the storage briefly: not while a member runs from dir
// (storage.ErrLocked). A removed member's data dir answers true with an
// error matching ErrRemoved.
func HasMember(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Clean(dir)); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	store, err := storage.Open(dir, storage.Options{NoOpenCheck: true})
	if err != nil {
		if errors.Is(err, storage.ErrRemoved) {
			return true, fmt.Errorf("%w: %w", ErrRemoved, err)
		}
		return false, err
	}
	defer store.Close()
	return holdsMember(store)
}

// ClusterIDFor derives the ID of a new cluster from its initial members and
// a token, the same on every initial member (as etcd derives its cluster ID
// from --initial-cluster and --initial-cluster-token): two clusters started
// with different members or tokens get different IDs, so members of one can
// never join the other by mistake.
func ClusterIDFor(members []raft.Member, token string) uint64 {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b raft.Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(strconv.FormatUint(m.ID, 10))
		b.WriteByte('=')
		b.WriteString(m.PeerAddr)
		b.WriteByte(',')
	}
	b.WriteString(token)
	sum := sha256.Sum256([]byte(b.String()))
	id := binary.BigEndian.Uint64(sum[:8])
	if id == 0 {
		id = 1
	}
	return id
}

// ParseMembers parses "1=host:port,2=host:port" (etcd's --initial-cluster
// form, without a scheme) into member records.
//
// Errors: raft.ErrInvalidConfig naming the part that is not id=host:port, a
// member ID that is not a positive integer or appears twice, an address
// without a port, or a list with no member.
func ParseMembers(s string) ([]raft.Member, error) {
	var out []raft.Member
	seen := map[uint64]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idStr, addr, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q is not id=host:port", raft.ErrInvalidConfig, part)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(idStr), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: %q: the member ID must be a positive integer", raft.ErrInvalidConfig, part)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: member %d is listed twice", raft.ErrInvalidConfig, id)
		}
		seen[id] = true
		addr = strings.TrimSpace(addr)
		if err := confchange.CheckPeerAddr(addr); err != nil {
			return nil, fmt.Errorf("%w: member %d: %s", raft.ErrInvalidConfig, id, refusalDetail(err))
		}
		out = append(out, raft.Member{ID: id, PeerAddr: addr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no member in %q", raft.ErrInvalidConfig, s)
	}
	return out, nil
}

// forceNewCluster rewrites the member in store as the only voter of its
// cluster (Config.ForceNewCluster), recorded with the address it
// advertises: the one given, else its stored record, else listenAddr.
func forceNewCluster(store *storage.Store, cfg GroupConfig, listenAddr string, logger *slog.Logger) error {
	id, err := store.Identity()
	if err != nil {
		return err
	}
	if id.MemberID != 0 && id.MemberID != cfg.ID {
		return &storage.IdentityError{Stored: id, Requested: storage.Identity{ClusterID: id.ClusterID, MemberID: cfg.ID}}
	}
	peers, _, err := raft.StoredPeers(store)
	if err != nil {
		return err
	}
	addr, err := advertisedPeer(cfg, listenAddr, "restart", peers, nil)
	if err != nil {
		return err
	}
	self := raft.Member{ID: cfg.ID, PeerAddr: addr, Metadata: maps.Clone(cfg.Metadata)}
	_, err = raft.ForceNewCluster(store, self, logger)
	return err
}

// RestoreBackup creates the data dir of a new one-member cluster from a
// backup written by Node.Backup (raft.RestoreBackup): self is the member
// that will run from dir (its ID and peer address), the only voter; every
// member of the backup is recorded as removed. The cluster gets a new,
// random ID. Start a Host on dir afterwards (InitialMembers and Join are
// then ignored) and add members to it as usual.
//
// Errors: raft.ErrCorruptBackup; raft.ErrInvalidConfig when dir already
// holds a member; the storage's.
func RestoreBackup(r io.Reader, dir string, self raft.Member) (err error) {
	store, err := storage.Open(dir, storage.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	has, err := holdsMember(store)
	if err != nil {
		return err
	}
	if has {
		return fmt.Errorf("%w: %s already holds a member", raft.ErrInvalidConfig, dir)
	}
	if _, err := raft.RestoreBackup(r, store, self); err != nil {
		return err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	cid := binary.BigEndian.Uint64(b[:]) | 1
	return store.SetIdentity(storage.Identity{ClusterID: cid, MemberID: self.ID})
}
