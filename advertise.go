package understudy

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
)

// advertisedPeer is the address this replica is recorded with and the
// others dial (HostConfig.AdvertisePeer, Config.AdvertisePeer): the one given, else the one the cluster
// already knows it by — its entry in InitialMembers, the record it was
// added with (a joiner), or its stored record (a restart) — and only when
// none exists the listen address, unless that is unspecified (0.0.0.0, ::):
// a member that recorded one would be dialed by every other member at its
// own address. Where a member listens and where it is reached differ behind
// a proxy, a NAT or a DNS name, and in a container.
func advertisedPeer(cfg GroupConfig, listenAddr string, mode string, stored map[uint64]string, joined []raft.Member) (string, error) {
	if cfg.advertise != "" {
		return cfg.advertise, nil
	}
	switch mode {
	case "bootstrap":
		for _, m := range cfg.InitialMembers {
			if m.ID == cfg.ID {
				return m.PeerAddr, nil
			}
		}
	case "join":
		for _, m := range joined {
			if m.ID == cfg.ID && m.PeerAddr != "" {
				return m.PeerAddr, nil
			}
		}
	}
	if addr, ok := stored[cfg.ID]; ok && confchange.CheckPeerAddr(addr) == nil {
		return addr, nil // (an unspecified one, recorded by older code, is replaced)
	}
	for _, m := range joined { // a restart that joined again
		if m.ID == cfg.ID && m.PeerAddr != "" {
			return m.PeerAddr, nil
		}
	}
	addr := listenAddr
	if err := confchange.CheckPeerAddr(addr); err != nil {
		return "", fmt.Errorf("%w: no peer address to advertise: the listen address %s is unspecified: set AdvertisePeer to the address the other members reach this one at",
			raft.ErrInvalidConfig, addr)
	}
	return addr, nil
}

// pickedPort returns members with this member's port 0 ("any port", for a
// one-member cluster started on a free port) replaced by the port the
// listener at ln got, so that the member is recorded with an address it is
// reached at.
func pickedPort(members []raft.Member, id uint64, ln net.Addr) []raft.Member {
	for i, m := range members {
		host, port, err := net.SplitHostPort(m.PeerAddr)
		if m.ID != id || err != nil || port != "0" {
			continue
		}
		_, lport, err := net.SplitHostPort(ln.String())
		if err != nil {
			return members
		}
		out := slices.Clone(members)
		out[i].PeerAddr = net.JoinHostPort(host, lport)
		return out
	}
	return members
}

// refusalDetail is a confchange refusal's detail without the sentinel's text.
func refusalDetail(err error) string {
	var r *confchange.Refusal
	if errors.As(err, &r) {
		return r.Detail
	}
	return err.Error()
}
