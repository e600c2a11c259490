package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveGradually: a file larger than a few steps is shrunk and removed; a file that
// is already gone is not an error.
func TestRemoveGradually(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.deleting")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2*RemoveStep + 12345); err != nil { // sparse: the steps, not the bytes, are tested
		t.Fatal(err)
	}
	f.Close()
	if err := RemoveGradually(path, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("stat after RemoveGradually: %v, want not found", err)
	}
	if err := RemoveGradually(path, nil); err != nil {
		t.Fatalf("RemoveGradually of a missing file: %v", err)
	}
}
