// Command kvctl is the operator's CLI of examples/kvserver, in the manner of
// etcdctl: keys, members, leadership and status over the servers' HTTP API.
//
//	kvctl put a 1
//	kvctl get a
//	kvctl member list
//	kvctl member add 4 127.0.0.1:7004 --client-addr 127.0.0.1:8004
//	kvctl member watch          # prints the members, then each second those that changed
//
// --endpoints lists client addresses (host:port, tried in order until one
// answers); -w json prints the server's JSON. Global flags go before the
// command. Exit codes: 0 done; 1 an error (the server's code and reason, or
// no endpoint answered); 2 a usage error (an unknown, misplaced or
// malformed flag or argument), printed with the usage; 3 a dry run that
// answered that the change would be refused. A command's flags may come
// before or after its arguments. A negative number is an argument; "--"
// ends the flags, for any key or value that starts with "-":
//
//	kvctl put temperature -1
//	kvctl put -- -key -value
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"
)

const usage = `kvctl [global flags] command [args]

Commands:
  put KEY VALUE [--prev-value V]      write (compare-and-swap with --prev-value)
  get KEY [--consistency stale]       read (linearizable by default)
  del KEY                             delete
  member list                         the members as the leader sees them
  member add ID PEER_ADDR [--client-addr A] [--voter] [--read-only] [--dry-run]
  member promote ID | demote ID | remove ID  [--dry-run]
  member update ID [--peer-addr A] [--client-addr A] [--dry-run]
                                      move a member: change its recorded addresses
  member watch [--interval 1s]        the members, then each interval those that changed
  leader transfer ID
  cluster get                         the replicated cluster settings
  cluster set NAME VALUE [NAME VALUE…] [--dry-run]
                                      e.g. cluster set target-voters 5 (names: target-voters,
                                      max-learners, auto-promote, failover-after, remove-dead-after)
  status                              every endpoint's status

Global flags (below) go before the command: kvctl -w json member list. A command's own flags
may come before or after its arguments. A negative number is an argument (kvctl put t -1);
"--" ends the flags, so that any key or value may start with "-" (kvctl put -- -k -v).

Exit codes: 0 done; 1 an error (the server's code and reason, or no endpoint answered);
2 a usage error; 3 a dry run (--dry-run) that answered that the change would be refused.

Global flags:
`

// client talks to kvserver endpoints.
type client struct {
	endpoints []string
	scheme    string
	http      *http.Client
	out       io.Writer
	format    string
}

// apiError is a kvserver error answer.
type apiError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"`
	Leader uint64 `json:"leader"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %s (leader %d)", e.Code, e.Msg, e.Leader)
}

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	endpoints := fs.String("endpoints", "127.0.0.1:8001", "client addresses of kvserver members, comma-separated (tried in order)")
	format := fs.String("w", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 10*time.Second, "how long a command may take")
	cacert := fs.String("cacert", "", "CA of the servers' HTTPS certificates (turns HTTPS on)")
	cert := fs.String("cert", "", "client certificate (PEM)")
	key := fs.String("key", "", "client key (PEM)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "Error: -w %q: want table or json\n", *format)
		return 2
	}
	c := &client{out: stdout, format: *format, scheme: "http", http: &http.Client{}}
	for e := range strings.SplitSeq(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.endpoints = append(c.endpoints, e)
		}
	}
	if len(c.endpoints) == 0 {
		fmt.Fprintln(stderr, "Error: --endpoints is empty")
		return 2
	}
	if *cacert != "" || *cert != "" {
		tcfg, err := tlsConfig(*cacert, *cert, *key)
		if err != nil {
			fmt.Fprintf(stderr, "Error: %v\n", err)
			return 2
		}
		c.scheme, c.http.Transport = "https", &http.Transport{TLSClientConfig: tcfg}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if fs.Arg(0) != "member" || fs.Arg(1) != "watch" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	if err := c.dispatch(ctx, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		var ue usageError
		var refused errWouldBeRefused
		switch {
		case errors.As(err, &ue):
			fmt.Fprintln(stderr)
			fs.Usage()
			return 2
		case errors.As(err, &refused):
			return 3
		}
		return 1
	}
	return 0
}

// usageError is a command line kvctl does not understand (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errWouldBeRefused is a dry run's answer that the change would be refused
// (exit code 3): the refusals are printed, nothing was changed.
type errWouldBeRefused struct{ n int }

func (e errWouldBeRefused) Error() string {
	if e.n == 1 {
		return "the dry run says it would be refused (nothing was changed)"
	}
	return fmt.Sprintf("the dry run says it would be refused, for %d reasons (nothing was changed)", e.n)
}

func tlsConfig(ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate", ca)
		}
		cfg.RootCAs = pool
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// do sends a request to the first endpoint that answers. An HTTP answer of
// any status counts as an answer: only a connection failure tries the next.
func (c *client) do(ctx context.Context, endpoint, method, path string, body io.Reader) (status int, data []byte, from string, err error) {
	targets := c.endpoints
	if endpoint != "" {
		targets = []string{endpoint}
	}
	var raw []byte
	if body != nil {
		if raw, err = io.ReadAll(body); err != nil {
			return 0, nil, "", err
		}
	}
	var last error
	for _, ep := range targets {
		var rd io.Reader
		if raw != nil {
			rd = strings.NewReader(string(raw))
		}
		req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+ep+path, rd)
		if err != nil {
			return 0, nil, "", err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			last = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return resp.StatusCode, data, ep, nil
	}
	return 0, nil, "", fmt.Errorf("no endpoint answered (%s): %v", strings.Join(targets, ","), last)
}

// call is do that turns an error answer into an *apiError.
func (c *client) call(ctx context.Context, method, path string, body io.Reader) ([]byte, error) {
	status, data, _, err := c.do(ctx, "", method, path, body)
	if err != nil {
		return nil, err
	}
	if status >= 300 {
		ae := &apiError{Status: status}
		if json.Unmarshal(data, ae) != nil || ae.Code == "" {
			return nil, fmt.Errorf("HTTP %d: %s", status, strings.TrimSpace(string(data)))
		}
		return nil, ae
	}
	return data, nil
}

func keyPath(k string) string { return "/kv/" + url.PathEscape(k) }

func (c *client) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"no command (try: kvctl -h)"}
	}
	switch args[0] {
	case "put":
		fs := flag.NewFlagSet("put", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		prev := fs.String("prev-value", "", "compare-and-swap: write only if the value is this")
		if err := parseInterspersed(fs, args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() != 2 {
			return usageError{"put KEY VALUE"}
		}
		path := keyPath(fs.Arg(0))
		if isSet(fs, "prev-value") {
			path += "?prev_value=" + url.QueryEscape(*prev)
		}
		if _, err := c.call(ctx, http.MethodPut, path, strings.NewReader(fs.Arg(1))); err != nil {
			return err
		}
		fmt.Fprintln(c.out, "OK")
	case "get":
		fs := flag.NewFlagSet("get", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cons := fs.String("consistency", "", "stale: read locally on the member asked")
		if err := parseInterspersed(fs, args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() != 1 {
			return usageError{"get KEY"}
		}
		path := keyPath(fs.Arg(0))
		if *cons != "" {
			path += "?consistency=" + url.QueryEscape(*cons)
		}
		v, err := c.call(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if c.format == "json" {
			return json.NewEncoder(c.out).Encode(map[string]string{"key": fs.Arg(0), "value": string(v)})
		}
		fmt.Fprintln(c.out, string(v))
	case "del":
		if len(args) == 3 && args[1] == "--" {
			args = []string{"del", args[2]} // no flags to end: del -k works as well
		}
		if len(args) != 2 {
			return usageError{"del KEY (del takes no flags; a key that starts with \"-\": del -- -k)"}
		}
		if _, err := c.call(ctx, http.MethodDelete, keyPath(args[1]), nil); err != nil {
			return err
		}
		fmt.Fprintln(c.out, "OK")
	case "member":
		return c.member(ctx, args[1:])
	case "leader":
		if len(args) < 2 || args[1] != "transfer" {
			return usageError{"leader transfer ID"}
		}
		pos, err := noFlags(args[2:], 1, "leader transfer ID")
		if err != nil {
			return err
		}
		args = append(args[:2], pos...)
		if _, err := c.call(ctx, http.MethodPost, "/leader/transfer?to="+url.QueryEscape(args[2]), nil); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "leadership transferred to %s\n", args[2])
	case "status":
		if _, err := noFlags(args[1:], 0, "status takes no arguments"); err != nil {
			return err
		}
		return c.status(ctx)
	case "cluster":
		return c.cluster(ctx, args[1:])
	default:
		return usageError{fmt.Sprintf("unknown command %q (try: kvctl -h)", args[0])}
	}
	return nil
}

// parseInterspersed parses flags that may come after positional arguments;
// "--" ends the flags: every argument after it is positional, even one that
// starts with "-". A negative number ("-1", no flag is named so) is an
// argument too.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if !strings.Contains(err.Error(), "not defined") {
				return err
			}
			// Parse stops after the argument it refused.
			if n := len(args) - len(fs.Args()); n > 0 && isNegativeNumber(args[n-1]) {
				pos = append(pos, args[n-1])
				args = fs.Args()
				continue
			}
			if name := undefinedFlag(err); globalFlags[name] {
				return fmt.Errorf("-%s is a global flag: it goes before the command (kvctl -%s … %s)", name, name, fs.Name())
			}
			return fmt.Errorf("%v (an argument that starts with \"-\" goes after \"--\", e.g. put KEY -- -x)", err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // Parse stopped at "--"
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// globalFlags are kvctl's own flags, which go before the command.
var globalFlags = map[string]bool{"endpoints": true, "w": true, "timeout": true, "cacert": true, "cert": true, "key": true}

// undefinedFlag is the name in flag's "flag provided but not defined: -x".
func undefinedFlag(err error) string {
	_, name, ok := strings.Cut(err.Error(), "not defined: ")
	if !ok {
		return ""
	}
	return strings.TrimLeft(name, "-")
}

// noFlags checks the arguments of a command that takes no flags: exactly n
// arguments (a negative number counts as one), and no flag, which would
// otherwise be silently ignored.
func noFlags(args []string, n int, synopsis string) ([]string, error) {
	fs := flag.NewFlagSet(strings.Fields(synopsis)[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := parseInterspersed(fs, args); err != nil {
		return nil, usageError{err.Error()}
	}
	if fs.NArg() != n {
		return nil, usageError{fmt.Sprintf("%s: %s given", synopsis, plural(fs.NArg(), "argument"))}
	}
	return fs.Args(), nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && ('0' <= s[1] && s[1] <= '9' || s[1] == '.')
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
