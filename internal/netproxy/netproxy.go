// Package netproxy is a TCP proxy for tests on loopback: a member that
// listens on one address and is reached through another, as behind a NAT, a
// load balancer, a DNS name or a container's port mapping. Cutting the
// proxy makes the member unreachable through it — and only through it: a
// test that cuts it proves that the other members dial the address the
// cluster recorded, not the one the member listens on. Pausing it stalls
// the connections through it without closing them: a peer that stopped
// answering (a stopped process, a network that drops everything).
package netproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards every connection accepted on its address to a target.
type Proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener  // nil while cut
	flowing chan struct{} // closed unless paused
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	closed  bool
	accepts atomic.Int64
}

// New starts a proxy on a free loopback port that forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}, flowing: make(chan struct{})}
	close(p.flowing)
	p.serve(ln)
	return p, nil
}

// Addr is the address the proxy listens on: the one to record.
func (p *Proxy) Addr() string { return p.addr }

// Accepted is how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepts.Load() }

// Pause stalls every connection through the proxy, in both directions,
// until Resume: what is sent is held (the sender's buffers fill up), and
// nothing is closed. New connections are accepted and stall alike.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // paused already
	}
}

// Resume lets the connections through the proxy flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// gate returns a channel closed unless the proxy is paused.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flowing
}

// Cut stops accepting and closes every connection through the proxy: the
// target is unreachable through it until Restore. It ends a pause.
func (p *Proxy) Cut() {
	p.Resume() // the connections closed, what a pause holds goes nowhere
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Restore listens again on the same address.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("netproxy: closed")
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("netproxy: listening again on %s: %w", p.addr, err)
	}
	p.serveLocked(ln)
	return nil
}

// Close cuts the proxy for good and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepts.Add(1)
			p.wg.Add(1)
			go p.forward(ln, c)
		}
	}()
}

// forward copies between c and a new connection to the target until either
// side closes or the proxy is cut.
func (p *Proxy) forward(ln net.Listener, c net.Conn) {
	defer p.wg.Done()
	t, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln != ln { // cut meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = t.Close()
		return
	}
	p.conns[c], p.conns[t] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, gatedReader{p, src})
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(t, c)
	go cp(c, t)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, t)
	p.mu.Unlock()
}

// gatedReader reads from r, then waits while the proxy is paused before it
// hands over what it read.
type gatedReader struct {
	p *Proxy
	r io.Reader
}

func (g gatedReader) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	<-g.p.gate()
	return n, err
}
