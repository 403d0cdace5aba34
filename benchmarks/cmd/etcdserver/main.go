// Command etcdserver is etcd's server (go.etcd.io/etcd/server/v3, the version
// in this module's go.mod), built here so that httpload can compare kvserver
// with it without an etcd install: the same entry point as etcd's own binary.
//
//	go build -o /tmp/etcd ./cmd/etcdserver && /tmp/etcd --version
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
