package understudy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// addressBookFile holds, in a host's data dir, the peer hosts' moves its
// mux learned (transport.Mux.Addresses): the peer address member records
// name, mapped to where that host is now. It is derived data — the hosts
// teach it again on their next connection — kept so that a restarted host
// dials a moved peer at once.
const addressBookFile = "peer-addresses.json"

// loadAddressBook reads the data dir's address book. A missing file is an
// empty book; an unreadable one is logged and ignored (nothing is lost:
// the peers teach it again).
func loadAddressBook(dir string, log *slog.Logger) map[string]string {
	b, err := os.ReadFile(filepath.Join(dir, addressBookFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var book map[string]string
	if err == nil {
		err = json.Unmarshal(b, &book)
	}
	if err != nil {
		log.Warn("ignoring the peer address book: the peer hosts teach it again", "file", filepath.Join(dir, addressBookFile), "err", err)
		return nil
	}
	return book
}

// saveAddressBook replaces the data dir's address book (write, sync,
// rename); a failure is logged (the book is a cache).
func saveAddressBook(dir string, book map[string]string, log *slog.Logger) {
	if err := writeFileAtomic(filepath.Join(dir, addressBookFile), book); err != nil {
		log.Warn("saving the peer address book", "err", err)
	}
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
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
	return nil
}
