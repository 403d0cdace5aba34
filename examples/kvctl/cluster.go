package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// settingNames maps kvctl's setting names to the API's JSON fields.
var settingNames = map[string]string{
	"target-voters":     "target_voters",
	"max-learners":      "max_learners",
	"auto-promote":      "auto_promote",
	"failover-after":    "failover_after",
	"remove-dead-after": "remove_dead_after",
}

func (c *client) cluster(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"cluster get | cluster set NAME VALUE …"}
	}
	switch args[0] {
	case "get":
		if _, err := noFlags(args[1:], 0, "cluster get takes no arguments"); err != nil {
			return err
		}
		raw, err := c.call(ctx, http.MethodGet, "/cluster", nil)
		if err != nil {
			return err
		}
		return c.printSettings(raw)
	case "set":
		fs := flag.NewFlagSet("cluster set", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		dryRun := fs.Bool("dry-run", false, "show the plan and every refusal; change nothing")
		if err := parseInterspersed(fs, args[1:]); err != nil {
			return usageError{err.Error()}
		}
		rest, dry := fs.Args(), *dryRun
		if len(rest) == 0 || len(rest)%2 != 0 {
			return usageError{"cluster set NAME VALUE [NAME VALUE…] [--dry-run]"}
		}
		body := map[string]any{}
		for i := 0; i < len(rest); i += 2 {
			field, ok := settingNames[rest[i]]
			if !ok {
				return usageError{fmt.Sprintf("unknown setting %q (target-voters, max-learners, auto-promote, failover-after, remove-dead-after)", rest[i])}
			}
			v := rest[i+1]
			switch field {
			case "target_voters", "max_learners":
				n, err := strconv.Atoi(v)
				if err != nil {
					return usageError{fmt.Sprintf("%s %q: an integer", rest[i], v)}
				}
				body[field] = n
			case "auto_promote":
				b, err := strconv.ParseBool(v)
				if err != nil {
					return usageError{fmt.Sprintf("%s %q: true or false", rest[i], v)}
				}
				body[field] = b
			default:
				body[field] = v
			}
		}
		b, _ := json.Marshal(body)
		path := "/cluster"
		if dry {
			path += "?dry_run=true"
		}
		raw, err := c.call(ctx, http.MethodPatch, path, strings.NewReader(string(b)))
		if err != nil {
			return err
		}
		if dry {
			return c.printDryRun(raw)
		}
		return c.printSettings(raw)
	}
	return usageError{fmt.Sprintf("unknown cluster command %q", args[0])}
}

func (c *client) printSettings(raw []byte) error {
	if c.format == "json" {
		_, err := c.out.Write(raw)
		return err
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("malformed answer: %v", err)
	}
	tw := newTable(c.out)
	for _, name := range []string{"target-voters", "max-learners", "auto-promote", "failover-after", "remove-dead-after"} {
		fmt.Fprintf(tw, "%s\t%v\n", name, s[settingNames[name]])
	}
	return tw.Flush()
}
