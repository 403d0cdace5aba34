package robustness_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var hostBin string // the hostproc binary

// buildHostProc builds internal/robustness/hostproc once per test binary.
func buildHostProc(t *testing.T) {
	t.Helper()
	hostBin = buildBinary(t, "github.com/understudy-raft/understudy/internal/robustness/hostproc")
}

// hostProc is one process running a host of many groups.
type hostProc struct {
	t     *testing.T
	args  []string
	http  string
	cmd   *exec.Cmd
	out   *lockedBuffer
	ready chan struct{}
	done  chan struct{}
}

func (p *hostProc) start() {
	p.t.Helper()
	p.out = &lockedBuffer{}
	p.cmd = exec.Command(hostBin, p.args...)
	p.cmd.Stderr = p.out
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.ready, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(p.ready)
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	p.t.Cleanup(p.kill)
}

// kill ends the process with SIGKILL: no clean stop, whatever it was
// writing (its groups' appends share every storage commit).
func (p *hostProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *hostProc) do(ctx context.Context, method, path, body string) (int, string) {
	r, err := http.NewRequestWithContext(ctx, method, "http://"+p.http+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostProcessesSurviveKill: three real processes, each a host of 8
// groups (a replica of every group), serve writes in every group through
// any host while one host is killed with SIGKILL — in the middle of
// storage commits that carry many groups' appends — and restarted from
// its data dir. No acknowledged write of any group is lost (each is read
// back, linearizably, through every host), and every group serves a write
// through the restarted host.
func TestHostProcessesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	buildHostProc(t)
	const groups = 8
	root := t.TempDir()
	peers := []string{freePort(t), freePort(t), freePort(t)}
	ps := make([]*hostProc, 3)
	for i := range ps {
		ps[i] = &hostProc{t: t, http: freePort(t), args: []string{
			"-index", fmt.Sprint(i + 1), "-dir", filepath.Join(root, fmt.Sprint(i+1)), "-listen", peers[i],
			"-peers", strings.Join(peers, ","), "-groups", fmt.Sprint(groups),
			"-storage-backend", os.Getenv("UNDERSTUDY_STORAGE_BACKEND"),
		}}
		ps[i].args = append(ps[i].args, "-http", ps[i].http)
		ps[i].start()
	}
	waitReady := func(p *hostProc) {
		select {
		case <-p.ready:
		case <-p.done:
			t.Fatalf("host exited: %s", p.out)
		case <-time.After(60 * time.Second):
			t.Fatalf("host not ready: %s", p.out)
		}
	}
	for _, p := range ps {
		waitReady(p)
	}
	var (
		mu    sync.Mutex
		acked = map[string]uint64{} // key → group; the value is the key
		live  = []bool{true, true, true}
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	pick := func(rng *rand.Rand) *hostProc {
		mu.Lock()
		defer mu.Unlock()
		for {
			if i := rng.IntN(3); live[i] {
				return ps[i]
			}
		}
	}
	for g := uint64(1); g <= groups; g++ {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(g, uint64(w)))
				for n := 0; wctx.Err() == nil; n++ {
					key := fmt.Sprintf("g%d-w%d-%d", g, w, n)
					rctx, cancel := context.WithTimeout(wctx, 3*time.Second)
					code, _ := pick(rng).do(rctx, http.MethodPut, fmt.Sprintf("/g/%d/%s", g, key), key)
					cancel()
					if code == http.StatusOK {
						mu.Lock()
						acked[key] = g
						mu.Unlock()
					}
				}
			}()
		}
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	live[2] = false
	before := len(acked)
	mu.Unlock()
	ps[2].kill()
	t.Logf("host 3 killed with SIGKILL; %d writes acknowledged so far", before)
	time.Sleep(500 * time.Millisecond)
	ps[2].start()
	waitReady(ps[2])
	mu.Lock()
	live[2] = true
	mu.Unlock()
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(acked) < groups {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	read := func(p *hostProc, g uint64, key string) string {
		var last string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			code, body := p.do(rctx, http.MethodGet, fmt.Sprintf("/g/%d/%s", g, key), "")
			cancel()
			if code == http.StatusOK {
				return body
			}
			last = fmt.Sprintf("%d %s", code, body)
		}
		t.Fatalf("group %d: reading %s: %s", g, key, last)
		return ""
	}
	for key, g := range acked {
		for i, p := range ps {
			if got := read(p, g, key); got != key {
				t.Fatalf("group %d: acknowledged write %s reads %q through host %d", g, key, got, i+1)
			}
		}
	}
	for g := uint64(1); g <= groups; g++ {
		code, body := ps[2].do(ctx, http.MethodPut, fmt.Sprintf("/g/%d/after", g), "1")
		for end := time.Now().Add(20 * time.Second); code != http.StatusOK && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
			code, body = ps[2].do(ctx, http.MethodPut, fmt.Sprintf("/g/%d/after", g), "1")
		}
		if code != http.StatusOK {
			t.Fatalf("group %d serves no write through the restarted host: %d %s", g, code, body)
		}
	}
	t.Logf("%d acknowledged writes in %d groups read back through every host", len(acked), groups)
}
