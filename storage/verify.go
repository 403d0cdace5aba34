package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// checkBoltStructure walks the page tree of a bbolt file as bbolt would read
// it, from the meta page bbolt picks, and reports the first structural
// damage: a page id past the high-water mark or referenced twice (a cycle
// would make bbolt descend forever and run out of memory), a page of the
// wrong type or that names another id, elements outside their page, too deep
// a tree, or a freelist naming a page that is in use. bbolt checksums only its
// meta pages and trusts the rest; this check runs at Open, before anything
// walks the tree, so that such damage is an error instead of a crash.
//
// It reads bbolt's on-disk format (version 2, stable since 2014) in native
// byte order, as bbolt writes it.
func checkBoltStructure(r io.ReaderAt) error {
	v := &boltVerifier{r: r, seen: map[uint64]bool{}}
	return v.run()
}

const (
	bPageHeader   = 16 // id u64, flags u16, count u16, overflow u32
	bElement      = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	bBucketHeader = 16 // root pgid u64, sequence u64
	bBranch       = 0x01
	bLeaf         = 0x02
	bMeta         = 0x04
	bFreelist     = 0x10
	bBucketLeaf   = 0x01
	bMagic        = 0xED0CDAED
	bVersion      = 2
	bMaxDepth     = 64
	bMetaSize     = 56 // magic..txid, then the checksum
)

var ne = binary.NativeEndian

type boltVerifier struct {
	r        io.ReaderAt
	pageSize uint64
	hwm      uint64 // first page id past the file's pages
	seen     map[uint64]bool
}

type boltMeta struct {
	pageSize       uint32
	root, freelist uint64
	hwm, txid      uint64
	validOK        bool
}

func (v *boltVerifier) readMeta(off int64) boltMeta {
	var b [bPageHeader + bMetaSize + 8]byte
	if _, err := v.r.ReadAt(b[:], off); err != nil {
		return boltMeta{}
	}
	m := b[bPageHeader:]
	h := fnv.New64a()
	h.Write(m[:bMetaSize])
	return boltMeta{
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		hwm:      ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
		validOK:  ne.Uint32(m[0:]) == bMagic && ne.Uint32(m[4:]) == bVersion && ne.Uint64(m[bMetaSize:]) == h.Sum64(),
	}
}

func (v *boltVerifier) run() error {
	m0 := v.readMeta(0)
	if !m0.validOK {
		// bbolt then finds the page size from the second meta page; try
		// the usual sizes.
		for _, ps := range []int64{4096, 8192, 16384, 65536, 1024, 2048, 32768} {
			if m := v.readMeta(ps); m.validOK && int64(m.pageSize) == ps {
				m0 = boltMeta{pageSize: m.pageSize}
				break
			}
		}
	}
	if m0.pageSize == 0 {
		return errors.New("no valid meta page")
	}
	m1 := v.readMeta(int64(m0.pageSize))
	if m0.pageSize < 512 || m0.pageSize > 1<<20 || m0.pageSize&(m0.pageSize-1) != 0 {
		return fmt.Errorf("page size %d", m0.pageSize)
	}
	// As bbolt's DB.meta: the newer one if valid, else the other.
	a, b := m0, m1
	if m1.txid > m0.txid {
		a, b = m1, m0
	}
	m := a
	if !a.validOK {
		m = b
	}
	if !m.validOK {
		return errors.New("no valid meta page")
	}
	v.pageSize, v.hwm = uint64(m0.pageSize), m.hwm
	v.seen[0], v.seen[1] = true, true
	if m.root != 0 {
		if err := v.visit(m.root, 0, "root bucket"); err != nil {
			return err
		}
	}
	if m.freelist != ^uint64(0) {
		return v.checkFreelist(m.freelist)
	}
	return nil
}

// page reads page id and its overflow pages, checking its header.
func (v *boltVerifier) page(id uint64, what string) ([]byte, error) {
	if id < 2 || id >= v.hwm {
		return nil, fmt.Errorf("%s: page %d outside [2, %d)", what, id, v.hwm)
	}
	hdr := make([]byte, bPageHeader)
	if _, err := v.r.ReadAt(hdr, int64(id*v.pageSize)); err != nil {
		return nil, fmt.Errorf("%s: read page %d: %w", what, id, err)
	}
	if got := ne.Uint64(hdr); got != id {
		return nil, fmt.Errorf("%s: page %d says it is page %d", what, id, got)
	}
	overflow := uint64(ne.Uint32(hdr[12:]))
	if id+overflow >= v.hwm {
		return nil, fmt.Errorf("%s: page %d overflows past page %d", what, id, v.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if v.seen[i] {
			return nil, fmt.Errorf("%s: page %d referenced twice", what, i)
		}
		v.seen[i] = true
	}
	p := make([]byte, (overflow+1)*v.pageSize)
	if _, err := v.r.ReadAt(p, int64(id*v.pageSize)); err != nil {
		return nil, fmt.Errorf("%s: read page %d: %w", what, id, err)
	}
	return p, nil
}

// visit checks the subtree rooted at page id.
func (v *boltVerifier) visit(id uint64, depth int, what string) error {
	if depth > bMaxDepth {
		return fmt.Errorf("%s: tree deeper than %d at page %d", what, bMaxDepth, id)
	}
	p, err := v.page(id, what)
	if err != nil {
		return err
	}
	switch flags := ne.Uint16(p[8:]); flags {
	case bBranch:
		count := int(ne.Uint16(p[10:]))
		if count == 0 || bPageHeader+count*bElement > len(p) {
			return fmt.Errorf("%s: branch page %d: %d elements", what, id, count)
		}
		for i := range count {
			e := bPageHeader + i*bElement
			pos, ksize := int(ne.Uint32(p[e:])), int(ne.Uint32(p[e+4:]))
			if e+pos+ksize > len(p) || pos < 0 {
				return fmt.Errorf("%s: branch page %d: element %d outside the page", what, id, i)
			}
			if err := v.visit(ne.Uint64(p[e+8:]), depth+1, what); err != nil {
				return err
			}
		}
		return nil
	case bLeaf:
		return v.checkLeaf(p, depth, fmt.Sprintf("%s: leaf page %d", what, id))
	default:
		return fmt.Errorf("%s: page %d has type %#x", what, id, flags)
	}
}

// checkLeaf checks the elements of a leaf page (or an inline bucket's page)
// and descends into the buckets it holds.
func (v *boltVerifier) checkLeaf(p []byte, depth int, what string) error {
	if len(p) < bPageHeader {
		return fmt.Errorf("%s: %d bytes", what, len(p))
	}
	count := int(ne.Uint16(p[10:]))
	if bPageHeader+count*bElement > len(p) {
		return fmt.Errorf("%s: %d elements do not fit", what, count)
	}
	for i := range count {
		e := bPageHeader + i*bElement
		flags := ne.Uint32(p[e:])
		pos, ksize, vsize := uint64(ne.Uint32(p[e+4:])), uint64(ne.Uint32(p[e+8:])), uint64(ne.Uint32(p[e+12:]))
		start := uint64(e) + pos
		if start+ksize+vsize > uint64(len(p)) {
			return fmt.Errorf("%s: element %d outside the page", what, i)
		}
		if flags&bBucketLeaf == 0 {
			continue
		}
		val := p[start+ksize : start+ksize+vsize]
		if len(val) < bBucketHeader {
			return fmt.Errorf("%s: element %d: bucket header of %d bytes", what, i, len(val))
		}
		name := fmt.Sprintf("bucket %q", p[start:start+ksize])
		if root := ne.Uint64(val); root != 0 {
			if err := v.visit(root, depth+1, name); err != nil {
				return err
			}
		} else if err := v.checkLeaf(val[bBucketHeader:], depth+1, name+" (inline)"); err != nil {
			return err
		}
	}
	return nil
}

func (v *boltVerifier) checkFreelist(id uint64) error {
	p, err := v.page(id, "freelist")
	if err != nil {
		return err
	}
	if flags := ne.Uint16(p[8:]); flags != bFreelist {
		return fmt.Errorf("freelist: page %d has type %#x", id, flags)
	}
	count, off := uint64(ne.Uint16(p[10:])), uint64(bPageHeader)
	if count == 0xFFFF {
		count, off = ne.Uint64(p[off:]), off+8
	}
	if count > (uint64(len(p))-off)/8 {
		return fmt.Errorf("freelist: %d ids do not fit in page %d", count, id)
	}
	free := make(map[uint64]bool, count)
	for i := range count {
		id := ne.Uint64(p[off+8*i:])
		if id < 2 || id >= v.hwm || v.seen[id] {
			return fmt.Errorf("freelist: page %d is in use or out of range", id)
		}
		free[id] = true
	}
	// Every page below the high-water mark is in the tree or free (bbolt
	// writes its pending pages into the freelist too). A page that is
	// neither is a subtree the walk could not reach: a damaged element
	// count or branch hides it, and with it keys — a log or a whole bucket
	// that would read as empty.
	for id := uint64(2); id < v.hwm; id++ {
		if !v.seen[id] && !free[id] {
			return fmt.Errorf("page %d is neither in the tree nor free: part of the tree is unreachable", id)
		}
	}
	return nil
}
