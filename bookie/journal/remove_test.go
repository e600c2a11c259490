package journal

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveGradually: a file larger than a few steps is shrunk and removed; a file that
// is already gone is not an error.
func TestRemoveGradually(t *testing.T) {
	path := filepath.Join(t.TempDir(), fileName(3)+deletingExt)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2*removeStep + 12345); err != nil { // sparse: the steps, not the bytes, are tested
		t.Fatal(err)
	}
	f.Close()
	if err := removeGradually(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("stat after removeGradually: %v, want not found", err)
	}
	if err := removeGradually(path); err != nil {
		t.Fatalf("removeGradually of a missing file: %v", err)
	}
}
