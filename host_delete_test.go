package understudy_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// TestHostDeleteGroupNotStarted: StoredGroups says a GroupNotStarted group
// can be deleted with DeleteGroup, and it can (it holds at most an
// identity: it never voted or acknowledged anything). A group that holds
// a vote but no removal record is still refused.
func TestHostDeleteGroupNotStarted(t *testing.T) {
	dir := t.TempDir()
	e, err := storage.OpenEngine(dir, storage.EngineOptions{NoSync: true})
	require.NoError(t, err)
	unstarted, err := e.Group(3, storage.GroupOptions{})
	require.NoError(t, err)
	require.NoError(t, unstarted.SetIdentity(storage.Identity{ClusterID: 9, MemberID: 7}))
	require.NoError(t, unstarted.Close())
	voted, err := e.Group(4, storage.GroupOptions{})
	require.NoError(t, err)
	require.NoError(t, voted.SetIdentity(storage.Identity{ClusterID: 9, MemberID: 8}))
	require.NoError(t, voted.Save(&raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(5)}, nil, nil))
	require.NoError(t, voted.Close())
	require.NoError(t, e.Close())

	h := openHost(t, dir, "", raft.SchedulerConfig{})
	stored, err := h.StoredGroups()
	require.NoError(t, err)
	require.Equal(t, []understudy.StoredGroup{
		{ID: 3, MemberID: 7, ClusterID: 9, State: understudy.GroupNotStarted},
		{ID: 4, MemberID: 8, ClusterID: 9, State: understudy.GroupMember},
	}, stored)

	require.NoError(t, h.DeleteGroup(3))
	require.ErrorIs(t, h.DeleteGroup(4), understudy.ErrGroupNotRemoved, "it voted: the group may count on it")
	stored, err = h.StoredGroups()
	require.NoError(t, err)
	require.Equal(t, []understudy.StoredGroup{{ID: 4, MemberID: 8, ClusterID: 9, State: understudy.GroupMember}}, stored)
}
