package understudy

import (
	"errors"
	"fmt"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
)

// validate reports every problem of cfg at once, before StartGroup opens
// the group's storage: a refused configuration leaves nothing behind.
// Whatever the storage holds, a configuration must not contradict itself
// (a restart ignores InitialMembers and Join, but not that both are set);
// validateBootstrap checks the initial members, which only a bootstrap
// uses. Each error wraps raft.ErrInvalidConfig (those of the Transport
// settings transport.ErrInvalidConfig) and names the field.
func (cfg GroupConfig) validate(h *Host) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{raft.ErrInvalidConfig}, args...)...))
	}
	if cfg.ID == 0 {
		bad("ID must be non-zero")
	}
	if cfg.advertise != "" {
		if err := confchange.CheckPeerAddr(cfg.advertise); err != nil {
			bad("AdvertisePeer: %v", refusalDetail(err))
		}
	}
	if len(cfg.InitialMembers) > 0 && len(cfg.Join) > 0 {
		bad("InitialMembers (a new cluster) and Join (an existing one) are both set: set one")
	}
	for i, a := range cfg.Join {
		if err := confchange.CheckPeerAddr(a); err != nil {
			bad("Join[%d]: %v", i, refusalDetail(err))
		}
	}
	if cfg.JoinTimeout < 0 {
		bad("JoinTimeout (%v) must not be negative (0: as long as the context allows)", cfg.JoinTimeout)
	}
	switch {
	case cfg.DisableQuiescence && cfg.Raft.Quiesce:
		bad("DisableQuiescence and Raft.Quiesce are both set: set one")
	case !cfg.DisableQuiescence && !cfg.Raft.Quiesce && (cfg.Raft.DisablePreVote || cfg.Raft.DisableCheckQuorum):
		// Said here, not as raft's "Quiesce needs ...": the user never
		// set Quiesce, the host's default did.
		bad("a host's groups quiesce by default, which needs CheckQuorum and PreVote (Raft.DisableCheckQuorum %t, Raft.DisablePreVote %t): set DisableQuiescence to run without them",
			cfg.Raft.DisableCheckQuorum, cfg.Raft.DisablePreVote)
	}
	if cfg.DisableRelay && cfg.Raft.Relay {
		bad("DisableRelay and Raft.Relay are both set: set one")
	}
	if cfg.DisableRelayAnswers && cfg.Raft.RelayAnswers {
		bad("DisableRelayAnswers and Raft.RelayAnswers are both set: set one")
	}
	rcfg := cfg.Raft
	rcfg.ID, rcfg.InitialMembers = cfg.ID, nil
	if cfg.ID != 0 {
		if err := rcfg.WithDefaults().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cfg.Storage.Validate(); err != nil {
		bad("Storage: %v", err)
	}
	tcfg := cfg.Transport
	tcfg.ID, tcfg.GroupID, tcfg.Mux, tcfg.Handler = max(cfg.ID, 1), cfg.GroupID, h.mux, &lateHandler{}
	tcfg.Listener, tcfg.ListenAddr = nil, ""
	if err := tcfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateBootstrap reports every problem of cfg's initial members, when
// the storage holds no member (they bootstrap it): the node's own checks
// (raft.Config.Validate: IDs, addresses, this member listed, no ID or
// address twice), and a ClusterID that is not theirs.
func (cfg GroupConfig) validateBootstrap(h *Host) error {
	if len(cfg.InitialMembers) == 0 {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{raft.ErrInvalidConfig}, args...)...))
	}
	rcfg := cfg.Raft
	rcfg.ID, rcfg.InitialMembers = cfg.ID, pickedPort(cfg.InitialMembers, cfg.ID, h.mux.Addr())
	if err := rcfg.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	if cfg.ClusterID != 0 {
		// Every initial member derives the cluster ID from the list and the
		// token: one given must be that one, or this member would be alone
		// in a cluster of its own.
		derived := ClusterIDFor(rcfg.InitialMembers, cfg.ClusterToken)
		if cfg.ClusterID != derived && cfg.ClusterID != ClusterIDFor(cfg.InitialMembers, cfg.ClusterToken) {
			bad("ClusterID %x is not the ID of InitialMembers with ClusterToken %q (ClusterIDFor gives %x): leave ClusterID zero or fix the list",
				cfg.ClusterID, cfg.ClusterToken, derived)
		}
	}
	return errors.Join(errs...)
}

// raftConfig is the node's configuration as StartGroup runs it: Raft,
// with quiescence on unless DisableQuiescence (validate refused a config
// that cannot quiesce and did not say so), relays on unless
// DisableRelay, and their standbys' answers through them unless
// DisableRelayAnswers.
func (cfg GroupConfig) raftConfig() raft.Config {
	rcfg := cfg.Raft
	rcfg.Quiesce = !cfg.DisableQuiescence
	rcfg.Relay = !cfg.DisableRelay
	rcfg.RelayAnswers = rcfg.RelayAnswers || (rcfg.Relay && !cfg.DisableRelayAnswers)
	return rcfg
}
