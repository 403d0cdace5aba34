package understudy

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// addressBookFile holds, in a host's data dir, the peer hosts' moves its
// mux learned (transport.Mux.Addresses): for each peer host ID that moved,
// where it is now and the addresses its members' records may still name.
// It is derived data — the hosts teach it again on their next connection —
// kept so that a restarted host dials a moved peer at once.
const addressBookFile = "peer-addresses.json"

// addressBookVersion is the book file's format. The first format (a JSON
// object of recorded address to current address, keyed by address rather
// than by host) has no version and is discarded when read.
const addressBookVersion = 2

// addressBook is the book file's content.
type addressBook struct {
	Version int                              `json:"version"`
	Hosts   map[uint64]transport.HostAddress `json:"hosts"`
}

// loadAddressBook reads the data dir's address book. A missing file is an
// empty book; an unreadable one, or one of another format, is logged and
// ignored (nothing is lost: the peers teach it again).
func loadAddressBook(dir string, log *slog.Logger) map[uint64]transport.HostAddress {
	path := filepath.Join(dir, addressBookFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var book addressBook
	if err == nil {
		err = json.Unmarshal(b, &book)
	}
	if err == nil && book.Version != addressBookVersion {
		err = fmt.Errorf("format %d, this release reads format %d (the first format, keyed by address, is dropped: it could route one host's traffic to another)", book.Version, addressBookVersion)
	}
	if err != nil {
		log.Warn("ignoring the peer address book: the peer hosts teach it again", "file", path, "err", err)
		return nil
	}
	return book.Hosts
}

// saveAddressBook replaces the data dir's address book (write, sync,
// rename); a failure is logged (the book is a cache).
func saveAddressBook(dir string, hosts map[uint64]transport.HostAddress, log *slog.Logger) {
	if err := writeFileAtomic(filepath.Join(dir, addressBookFile), addressBook{Version: addressBookVersion, Hosts: hosts}); err != nil {
		log.Warn("saving the peer address book", "err", err)
	}
}

// hostIDFile holds, in a host's data dir, the host's ID: made once, at
// random, the first time a host opens the data dir, and never changed. Its
// peers know the host by it (transport.MuxConfig.HostID).
const hostIDFile = "host-id"

// loadHostID returns the data dir's host ID, making it if the data dir has
// none. The caller holds the data dir (the storage engine's lock).
//
// Errors: storage.ErrCorrupt for a file that holds no host ID (never made
// over: the host's peers know it by the one it had); the file system's.
func loadHostID(dir string) (uint64, error) {
	path := filepath.Join(dir, hostIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
		if perr != nil || id == 0 {
			return 0, fmt.Errorf("%w: %s holds no host ID (%q): restore it, or remove it to make the host a new one to its peers", storage.ErrCorrupt, path, strings.TrimSpace(string(b)))
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("understudy: reading the host ID: %w", err)
	}
	var id uint64
	for id == 0 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return 0, fmt.Errorf("understudy: making a host ID: %w", err)
		}
		id = binary.BigEndian.Uint64(r[:])
	}
	if err := writeBytesAtomic(path, []byte(fmt.Sprintf("%016x\n", id))); err != nil {
		return 0, fmt.Errorf("understudy: saving the host ID: %w", err)
	}
	return id, nil
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeBytesAtomic(path, append(b, '\n'))
}

// writeBytesAtomic replaces path with b: a temporary file written and
// synced, renamed over it, and the directory synced.
func writeBytesAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return fmt.Errorf("syncing %s: %w", filepath.Dir(path), err)
		}
	}
	return nil
}
