package ledger

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func testMeta() *Metadata {
	return &Metadata{
		LedgerID: 7, State: StateOpen, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		Digest: DigestCRC32C, Password: []byte("pw"),
		Ensembles: []Ensemble{
			{FirstEntry: 0, Bookies: []string{"a:1", "b:1", "c:1"}},
			{FirstEntry: 10, Bookies: []string{"a:1", "d:1", "c:1"}},
			{FirstEntry: 25, Bookies: []string{"e:1", "d:1", "c:1"}},
		},
		LastEntryID: -1, CTime: 1700000000000,
	}
}

func TestMetadataJSON(t *testing.T) {
	m := testMeta()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"state": "OPEN", "digest": "CRC32C", "password": "cHc=", "ledgerId": 7.0, "lastEntryId": -1.0} {
		if raw[k] != want {
			t.Errorf("%s = %v, want %v", k, raw[k], want)
		}
	}
	if !strings.Contains(string(b), `"ensembles":[{"firstEntry":0,"bookies":["a:1","b:1","c:1"]}`) {
		t.Errorf("ensembles layout: %s", b)
	}
	back, err := UnmarshalMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(m) {
		t.Fatalf("round trip: %+v != %+v", back, m)
	}
	for _, s := range []State{StateOpen, StateInRecovery, StateClosed} {
		var got State
		if err := got.UnmarshalText([]byte(s.String())); err != nil || got != s {
			t.Errorf("state %v round trip: %v %v", s, got, err)
		}
	}
}

func TestMetadataValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(m *Metadata)
		ok   bool
	}{
		{"valid", func(m *Metadata) {}, true},
		{"aq > wq", func(m *Metadata) { m.AckQuorum = 3 }, false},
		{"wq > e", func(m *Metadata) { m.WriteQuorum = 4 }, false},
		{"aq 0", func(m *Metadata) { m.AckQuorum = 0 }, false},
		{"no ensembles", func(m *Metadata) { m.Ensembles = nil }, false},
		{"first not 0", func(m *Metadata) { m.Ensembles[0].FirstEntry = 1 }, false},
		{"unsorted", func(m *Metadata) { m.Ensembles[2].FirstEntry = 10 }, false},
		{"short ensemble", func(m *Metadata) { m.Ensembles[1].Bookies = m.Ensembles[1].Bookies[:2] }, false},
		{"duplicate bookie", func(m *Metadata) { m.Ensembles[1].Bookies[1] = "a:1" }, false},
		{"empty bookie", func(m *Metadata) { m.Ensembles[1].Bookies[1] = "" }, false},
		{"bad state", func(m *Metadata) { m.State = 9 }, false},
		{"bad digest", func(m *Metadata) { m.Digest = 9 }, false},
		{"open with last entry", func(m *Metadata) { m.LastEntryID = 3 }, false},
		{"closed", func(m *Metadata) { m.State, m.LastEntryID, m.Length = StateClosed, 30, 100 }, true},
		{"closed at ensemble key - 1", func(m *Metadata) { m.State, m.LastEntryID = StateClosed, 24 }, true},
		{"closed before last ensemble", func(m *Metadata) { m.State, m.LastEntryID = StateClosed, 23 }, false},
		{"negative id", func(m *Metadata) { m.LedgerID = -1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testMeta()
			tc.mut(m)
			err := m.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("error %v is not ErrBadMetadata", err)
			}
		})
	}
	if _, err := UnmarshalMetadata([]byte(`{"state":"WEIRD"}`)); !errors.Is(err, ErrBadMetadata) {
		t.Fatalf("bad state: %v", err)
	}
}

func TestEnsembleAt(t *testing.T) {
	m := testMeta()
	for _, tc := range []struct {
		entry int64
		want  string
	}{{0, "b:1"}, {9, "b:1"}, {10, "d:1"}, {24, "d:1"}, {25, "d:1"}, {1 << 40, "d:1"}} {
		if got := m.EnsembleAt(tc.entry)[1]; got != tc.want {
			t.Errorf("EnsembleAt(%d)[1] = %s, want %s", tc.entry, got, tc.want)
		}
	}
	if got, want := m.WriteSet(26), []string{"c:1", "e:1"}; !slices.Equal(got, want) {
		t.Errorf("WriteSet(26) = %v, want %v", got, want)
	}
	r := m.withEnsemble(25, []string{"f:1", "d:1", "c:1"})
	if len(r.Ensembles) != 3 || r.Ensembles[2].Bookies[0] != "f:1" || m.Ensembles[2].Bookies[0] != "e:1" {
		t.Errorf("withEnsemble replace: %+v (orig %+v)", r.Ensembles, m.Ensembles)
	}
	a := m.withEnsemble(30, []string{"f:1", "d:1", "c:1"})
	if len(a.Ensembles) != 4 || a.Ensembles[3].FirstEntry != 30 {
		t.Errorf("withEnsemble append: %+v", a.Ensembles)
	}
}
