package topicname

import (
	"errors"
	"strings"
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

// TestNameRules: the characters and lengths of docs' "Rejected" list, for every form a name
// comes in (short, full, partition, segment, namespace), and what stays accepted.
func TestNameRules(t *testing.T) {
	long := strings.Repeat("x", MaxLocalLen)
	longPart := strings.Repeat("t", MaxPartLen)
	for _, in := range []string{
		"..", ".", "public/default/..", "persistent://public/default/.",
		"a\x00b", "persistent://public/default/a\x00b", "a\rb", "a\nb", "a\tb", "a\x7fb",
		"a\xffb", // not UTF-8
		long + "y", "persistent://public/default/" + long + "y-partition-1",
		strings.Repeat("z", 100_000),
		"../default/t", "./default/t", "public/../t", "public/./t",
		"persistent://" + longPart + "t/ns/t", "persistent://t/" + longPart + "n/t",
		"persistent://te nant/ns/t", "persistent://t/n\x00s/t", "persistent://t/ns\n/t",
		"segment://a/b/../0000-7fff-1", "segment://a/b/x\ny/0000-7fff-1", "segment://../b/t/0000-7fff-1",
	} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%.80q): err = %v, want ErrInvalid", in, err)
		} else if len(err.Error()) > 300 {
			t.Errorf("Parse(%.80q): the error quotes the whole name (%d bytes)", in, len(err.Error()))
		}
	}
	for _, ns := range [][2]string{{"..", "ns"}, {"t", "."}, {"t", ".."}, {"", "ns"}, {"t", ""}, {"t", "a/b"},
		{longPart + "x", "ns"}, {"t", "a\x00"}} {
		if err := CheckNamespace(ns[0], ns[1]); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckNamespace(%.40q, %.40q): %v, want ErrInvalid", ns[0], ns[1], err)
		}
	}
	for _, in := range []string{"persistent://public/default/" + long, "persistent://public/default/" + long + "-partition-99",
		"persistent://" + longPart + "/" + longPart + "/t", "a/b/..x", "a/b/x..", "a/b/caf\u00e9 \u2603 100%", "a/b/x?y#z",
		"...", "a.../b/t"} {
		if n, err := Parse(in); err != nil {
			t.Errorf("Parse(%.80q): %v", in, err)
		} else if back, err := FromManagedLedgerName(n.ManagedLedgerName()); err != nil || back != n {
			t.Errorf("Parse(%.80q): managed ledger name round trip: %v %v", in, back, err)
		}
	}
	if err := CheckLocal(long); err != nil {
		t.Errorf("CheckLocal of %d bytes: %v", len(long), err)
	}
	if err := CheckTenant(".."); !errors.Is(err, ErrInvalid) {
		t.Errorf("CheckTenant(..): %v", err)
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
