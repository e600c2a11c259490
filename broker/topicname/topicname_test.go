package topicname

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, full, base string
		partition      int
	}{
		{"t", "persistent://public/default/t", "persistent://public/default/t", -1},
		{"a/b/t", "persistent://a/b/t", "persistent://a/b/t", -1},
		{"persistent://a/b/t", "persistent://a/b/t", "persistent://a/b/t", -1},
		{"t-partition-3", "persistent://public/default/t-partition-3", "persistent://public/default/t", 3},
		{"persistent://a/b/x-partition-12", "persistent://a/b/x-partition-12", "persistent://a/b/x", 12},
		{"t-partition-x", "persistent://public/default/t-partition-x", "persistent://public/default/t-partition-x", -1},
		{"t-partition-01", "persistent://public/default/t-partition-01", "persistent://public/default/t-partition-01", -1},
		{"my.topic=1:2", "persistent://public/default/my.topic=1:2", "persistent://public/default/my.topic=1:2", -1},
		{"non-persistent://a/b/t-partition-1", "non-persistent://a/b/t-partition-1", "non-persistent://a/b/t", 1},
	} {
		n, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if n.String() != tc.full || n.Base().String() != tc.base || n.Partition != tc.partition {
			t.Errorf("Parse(%q) = %s (base %s, partition %d), want %s (base %s, partition %d)",
				tc.in, n, n.Base(), n.Partition, tc.full, tc.base, tc.partition)
		}
		back, err := FromManagedLedgerName(n.ManagedLedgerName())
		if err != nil || back != n {
			t.Errorf("managed ledger name %q round trip: %v, %v", n.ManagedLedgerName(), back, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "persistent://a/b", "persistent://a/c/b/t", "non-persistent://a/b",
		"http://a/b/t", "a/b/", "a//t", "a b/ns/t", "persistent://a/b/"} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): err = %v, want ErrInvalid", in, err)
		}
	}
}

func TestPartitionName(t *testing.T) {
	n := MustParse("a/b/t")
	p := n.PartitionName(2)
	if p.String() != "persistent://a/b/t-partition-2" || p.Partition != 2 || p.Base() != n {
		t.Fatalf("partition 2 of %s: %s", n, p)
	}
	if n.NamespaceName() != "a/b" {
		t.Fatal(n.NamespaceName())
	}
	if _, _, err := ParseNamespace("a/b/c"); err == nil {
		t.Fatal("ParseNamespace accepted a/b/c")
	}
}

func TestSegmentNames(t *testing.T) {
	n, err := Parse("segment://a/b/t/0000-7fff-1")
	if err != nil || !n.IsSegment() || !n.IsPersistent() || n.Local != "t/0000-7fff-1" || n.Partition != -1 ||
		n.String() != "segment://a/b/t/0000-7fff-1" {
		t.Fatalf("parse: %+v %v", n, err)
	}
	back, err := FromManagedLedgerName(n.ManagedLedgerName())
	if err != nil || back != n {
		t.Fatalf("managed ledger name %q round trip: %v %v", n.ManagedLedgerName(), back, err)
	}
	for _, in := range []string{"segment://a/b/t", "segment://a/b/t/x", "segment://a/b/t/0000-7fff", "segment://a/b//0000-7fff-1",
		"segment://a/b/t/0000-7fff-1/x", "segment://a/b/t/0000-7FFF-1"} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): err = %v, want ErrInvalid", in, err)
		}
	}
}
