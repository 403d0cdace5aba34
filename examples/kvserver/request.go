package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Strict input. A request is refused (400, and nothing changes) rather
// than half understood: an unknown query parameter or one given twice, a
// dry_run value strconv.ParseBool does not take, a body on a route that
// takes none, a JSON body that is not exactly one object of the route's
// documented fields. Ignoring any of them once turned "?dry_run=1" into a
// real removal.

// errBadRequest is the cause of every refusal of malformed input.
var errBadRequest = errors.New("malformed request")

// query parses r's query and refuses a parameter the route does not know
// (known lists those it does), one given twice, or a malformed query.
func query(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// A malformed ?prev_value must never turn a compare-and-swap into
		// a plain write.
		return nil, fmt.Errorf("%w: the query is not percent-encoded correctly: %v", errBadRequest, err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("%w: unknown query parameter %q on %s %s (%s)", errBadRequest, name, r.Method, routeName(r), knownList(known))
		}
		if len(q[name]) > 1 {
			return nil, fmt.Errorf("%w: query parameter %q given %d times", errBadRequest, name, len(q[name]))
		}
	}
	return q, nil
}

// knownList says which parameters a route takes.
func knownList(known []string) string {
	switch len(known) {
	case 0:
		return "it takes none"
	case 1:
		return "it takes " + known[0]
	}
	return "it takes " + strings.Join(known[:len(known)-1], ", ") + " and " + known[len(known)-1]
}

// routeName is the route of r as the docs write it (/members/{id}, …).
func routeName(r *http.Request) string {
	if r.Pattern != "" {
		if _, path, ok := strings.Cut(r.Pattern, " "); ok {
			return path
		}
		return r.Pattern
	}
	if strings.HasPrefix(r.URL.EscapedPath(), "/kv/") {
		return "/kv/{key}"
	}
	return r.URL.Path
}

// dryRunParam is q's dry_run: false when absent; any value
// strconv.ParseBool takes ("1", "t", "true", "TRUE", "0", "false", …);
// anything else is an error, never a real change.
func dryRunParam(q url.Values) (bool, error) {
	vs, ok := q["dry_run"]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(vs[0])
	if err != nil {
		return false, fmt.Errorf("%w: dry_run=%q: want a boolean (true, false, 1, 0, t, f)", errBadRequest, vs[0])
	}
	return b, nil
}

// noBody refuses a body on a route that takes none: what it says would be
// ignored (a {"dry_run": true} on a promotion, say).
func noBody(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var b [1]byte
	n, _ := io.ReadFull(r.Body, b[:])
	if n > 0 {
		return fmt.Errorf("%w: %s %s takes no body", errBadRequest, r.Method, routeName(r))
	}
	return nil
}

// decodeObject decodes body into out, which must be a pointer to a struct
// whose JSON field names are fields: the body must be exactly one JSON
// object, of those fields only (spelled exactly, each at most once), and
// nothing after it but white space.
func decodeObject(body []byte, out any, fields ...string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty body: want a JSON object")
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want a JSON object, got %v", tokenString(tok))
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string) // an object's keys are strings
		if !slices.Contains(fields, name) {
			return fmt.Errorf("unknown field %q (fields: %s)", name, strings.Join(fields, ", "))
		}
		if _, dup := obj[name]; dup {
			return fmt.Errorf("field %q given twice", name)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		obj[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	// The keys are exact and single: unmarshal the object proper.
	var sb strings.Builder
	sb.WriteByte('{')
	first := true
	for _, name := range fields {
		v, ok := obj[name]
		if !ok {
			continue
		}
		if !first {
			sb.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name)
		sb.Write(k)
		sb.WriteByte(':')
		sb.Write(v)
	}
	sb.WriteByte('}')
	return json.Unmarshal([]byte(sb.String()), out)
}

func tokenString(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Delim:
		return string(t)
	}
	return fmt.Sprintf("%v", tok)
}

// checkMemberAddr checks an address a member is recorded with (what others
// dial): host:port with a port from 1 to 65535 and a host that names one
// machine — not empty, not 0.0.0.0 nor :: (an address to listen on, that
// nobody can dial).
func checkMemberAddr(addr string) error {
	if err := checkHostPort(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "" {
		return errors.New("no host: an address to listen on, not one others can dial")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%s is unspecified: an address to listen on, not one others can dial", host)
	}
	return nil
}
