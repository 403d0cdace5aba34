package confchange

import (
	"errors"
	"testing"
	"time"
)

func TestClusterSettingsRoundTrip(t *testing.T) {
	for _, c := range []ClusterSettings{
		SeedClusterSettings(Settings{}, true),
		{TargetVoters: 9, MaxLearners: 64, AutoPromote: false, FailoverAfter: time.Nanosecond, RemoveDeadAfter: 365 * 24 * time.Hour},
		{TargetVoters: 1, MaxLearners: 1, AutoPromote: true, FailoverAfter: 30 * time.Second},
	} {
		got, err := DecodeClusterSettings(c.Encode())
		if err != nil || got != c {
			t.Fatalf("round trip of %v: %v, %v", c, got, err)
		}
	}
	if got := SeedClusterSettings(Settings{TargetVoters: 5, MaxLearners: 3}, false); got.TargetVoters != 5 || got.MaxLearners != 3 ||
		got.AutoPromote || got.FailoverAfter != DefaultFailoverAfter {
		t.Fatalf("seed: %v", got)
	}
	s := ClusterSettings{TargetVoters: 5, MaxLearners: 4, FailoverAfter: time.Second, RemoveDeadAfter: time.Minute}.Apply(Settings{Stabilization: time.Second})
	if s.TargetVoters != 5 || s.MaxLearners != 4 || s.FailoverAfter != time.Second || s.RemoveDeadAfter != time.Minute || s.Stabilization != time.Second {
		t.Fatalf("apply: %v", s)
	}
}

func TestClusterSettingsValidate(t *testing.T) {
	for _, c := range []ClusterSettings{
		{TargetVoters: 4, MaxLearners: 2, FailoverAfter: time.Second},
		{TargetVoters: 11, MaxLearners: 2, FailoverAfter: time.Second},
		{TargetVoters: 0, MaxLearners: 2, FailoverAfter: time.Second},
		{TargetVoters: 3, MaxLearners: 0, FailoverAfter: time.Second},
		{TargetVoters: 3, MaxLearners: 2, FailoverAfter: 0},
		{TargetVoters: 3, MaxLearners: 2, FailoverAfter: time.Second, RemoveDeadAfter: -1},
		{TargetVoters: 3, MaxLearners: 2, FailoverAfter: time.Minute, RemoveDeadAfter: time.Second}, // removed before a voter would fail over
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidSettings) || Code(err) != "invalid_setting" {
			t.Errorf("%v: %v, want invalid_setting", c, err)
		}
	}
}

func TestDecodeClusterSettingsRejects(t *testing.T) {
	good := SeedClusterSettings(Settings{}, true).Encode()
	cases := map[string][]byte{
		"empty":        nil,
		"version":      append([]byte{2}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"flags":        {1, 3, 2, 2, 1, 0},
		"even target":  {1, 4, 2, 1, 1, 0},
		"overlong":     {1, 0x83, 0x00, 2, 1, 1, 0},
		"huge learner": {1, 3, 0xff, 0x01, 1, 1, 0},
	}
	for name, b := range cases {
		if _, err := DecodeClusterSettings(b); !errors.Is(err, ErrInvalidSettings) {
			t.Errorf("%s: %v, want ErrInvalidSettings", name, err)
		}
	}
}

func FuzzDecodeClusterSettings(f *testing.F) {
	f.Add(SeedClusterSettings(Settings{}, true).Encode())
	f.Add([]byte{1, 3, 2, 1, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeClusterSettings(b)
		if err != nil {
			return
		}
		if got, err := DecodeClusterSettings(c.Encode()); err != nil || got != c {
			t.Fatalf("re-decode of %v: %v %v", c, got, err)
		}
		if string(c.Encode()) != string(b) {
			t.Fatalf("not canonical: %x decodes to %v which encodes to %x", b, c, c.Encode())
		}
	})
}
