package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// GroupInfos tells a group with raft state, a removed one, one with only
// an identity and one with nothing apart, the open ones too.
func TestGroupInfos(t *testing.T) {
	e := openEngine(t, t.TempDir(), EngineOptions{NoSync: true})
	member := group(t, e, 1)
	require.NoError(t, member.SetIdentity(Identity{ClusterID: 9, MemberID: 1}))
	require.NoError(t, member.Save(&raftpb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1)}, nil, nil))
	removed := group(t, e, 2)
	require.NoError(t, removed.MarkRemoved())
	require.NoError(t, removed.Close())
	identity := group(t, e, 3)
	require.NoError(t, identity.SetIdentity(Identity{ClusterID: 9, MemberID: 3, Incarnation: 0xabc}))
	group(t, e, 4) // nothing but its buckets
	logged := group(t, e, 5)
	require.NoError(t, logged.Save(nil, []*raftpb.Entry{{Term: proto.Uint64(1), Index: proto.Uint64(1)}}, nil))

	infos, err := e.GroupInfos()
	require.NoError(t, err)
	require.Equal(t, []GroupInfo{
		{ID: 1, Identity: Identity{ClusterID: 9, MemberID: 1}, HasState: true},
		{ID: 2, Removed: true},
		{ID: 3, Identity: Identity{ClusterID: 9, MemberID: 3, Incarnation: 0xabc}},
		{ID: 4},
		{ID: 5, HasState: true},
	}, infos)
	info, err := e.GroupInfo(3)
	require.NoError(t, err)
	require.Equal(t, infos[2], info)
	_, err = e.GroupInfo(6)
	require.ErrorIs(t, err, ErrNoGroup)
	require.NoError(t, e.Close())
	_, err = e.GroupInfos()
	require.ErrorIs(t, err, ErrClosed)
}
