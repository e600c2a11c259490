package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/magnetar-io/magnetar/metadata"
)

// Cookie binds a data dir to a bookie id and a cluster instance. It is stored in the data dir
// (current/VERSION) and in the metadata store (metadata.CookieKey). See checkCookie for the
// rules.
type Cookie struct {
	Layout     int    `json:"layout"`
	BookieID   string `json:"bookieId"`
	InstanceID string `json:"instanceId"`
	DataDir    string `json:"dataDir"`
}

const cookieLayout = 1

// ErrCookie is returned when the data dir and the metadata disagree about who this bookie is.
var ErrCookie = errors.New("bookie: cookie mismatch")

func cookiePath(dataDir string) string { return filepath.Join(dataDir, "current", "VERSION") }

func readLocalCookie(dataDir string) (Cookie, bool, error) {
	b, err := os.ReadFile(cookiePath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return Cookie{}, false, nil
	}
	if err != nil {
		return Cookie{}, false, fmt.Errorf("read cookie: %w", err)
	}
	var c Cookie
	if err := json.Unmarshal(b, &c); err != nil {
		return Cookie{}, false, fmt.Errorf("%w: local cookie %s unreadable: %v", ErrCookie, cookiePath(dataDir), err)
	}
	return c, true, nil
}

func writeLocalCookie(dataDir string, c Cookie) error {
	dir := filepath.Dir(cookiePath(dataDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	tmp := cookiePath(dataDir) + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, cookiePath(dataDir)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ClusterInstance returns the cluster instance id, creating it on first use.
func ClusterInstance(ctx context.Context, store metadata.Store) (string, error) {
	kv, err := store.Get(ctx, metadata.KeyClusterInstance)
	if err == nil {
		return string(kv.Value), nil
	}
	if !errors.Is(err, metadata.ErrNotFound) {
		return "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	if _, err := store.Put(ctx, metadata.KeyClusterInstance, []byte(id), metadata.NotExists); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) { // another process created it first
			kv, err := store.Get(ctx, metadata.KeyClusterInstance)
			if err != nil {
				return "", err
			}
			return string(kv.Value), nil
		}
		return "", err
	}
	return id, nil
}

// dataDirEmpty reports whether dataDir holds nothing but (possibly) an empty current/.
func dataDirEmpty(dataDir string) (bool, error) {
	ents, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if e.Name() == "current" {
			sub, err := os.ReadDir(filepath.Join(dataDir, "current"))
			if err != nil {
				return false, err
			}
			if len(sub) == 0 {
				continue
			}
		}
		return false, nil
	}
	return true, nil
}

// checkCookie enforces the identity rules before a bookie touches its data dir:
//
//  1. local cookie present: its bookie id and instance id must equal ours and the cluster's,
//     and the metadata cookie (if any) must equal it; a missing metadata cookie is rewritten.
//  2. local cookie absent, metadata cookie present: this id had data elsewhere; starting on an
//     empty dir would serve "no such entry" for entries it acknowledged — refuse.
//  3. local cookie absent, data dir not empty: the dir belongs to something else — refuse.
//  4. neither: a new bookie — write the metadata cookie (must not exist), then the local one.
func checkCookie(ctx context.Context, store metadata.Store, dataDir, bookieID string) (Cookie, error) {
	instance, err := ClusterInstance(ctx, store)
	if err != nil {
		return Cookie{}, fmt.Errorf("cluster instance: %w", err)
	}
	want := Cookie{Layout: cookieLayout, BookieID: bookieID, InstanceID: instance, DataDir: dataDir}
	local, haveLocal, err := readLocalCookie(dataDir)
	if err != nil {
		return Cookie{}, err
	}
	var remote Cookie
	kv, err := store.Get(ctx, metadata.CookieKey(bookieID))
	haveRemote := err == nil
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return Cookie{}, fmt.Errorf("read cookie from metadata: %w", err)
	}
	if haveRemote {
		if err := json.Unmarshal(kv.Value, &remote); err != nil {
			return Cookie{}, fmt.Errorf("%w: metadata cookie for %s unreadable: %v", ErrCookie, bookieID, err)
		}
	}
	switch {
	case haveLocal:
		if local.BookieID != bookieID {
			return Cookie{}, fmt.Errorf("%w: data dir %s belongs to bookie %q, not %q", ErrCookie, dataDir, local.BookieID, bookieID)
		}
		if local.InstanceID != instance {
			return Cookie{}, fmt.Errorf("%w: data dir %s belongs to cluster instance %s, not %s", ErrCookie, dataDir, local.InstanceID, instance)
		}
		if haveRemote && (remote.BookieID != local.BookieID || remote.InstanceID != local.InstanceID) {
			return Cookie{}, fmt.Errorf("%w: metadata cookie for %s does not match the data dir's", ErrCookie, bookieID)
		}
		if !haveRemote {
			b, _ := json.Marshal(local)
			if _, err := store.Put(ctx, metadata.CookieKey(bookieID), b, metadata.NotExists); err != nil {
				return Cookie{}, fmt.Errorf("write metadata cookie: %w", err)
			}
		}
		return local, nil
	case haveRemote:
		return Cookie{}, fmt.Errorf("%w: metadata has a cookie for bookie %q but data dir %s has none: "+
			"a bookie whose data was wiped must not rejoin under the same id (decommission it first)",
			ErrCookie, bookieID, dataDir)
	default:
		empty, err := dataDirEmpty(dataDir)
		if err != nil {
			return Cookie{}, err
		}
		if !empty {
			return Cookie{}, fmt.Errorf("%w: data dir %s is not empty but has no cookie", ErrCookie, dataDir)
		}
		b, _ := json.Marshal(want)
		if _, err := store.Put(ctx, metadata.CookieKey(bookieID), b, metadata.NotExists); err != nil {
			return Cookie{}, fmt.Errorf("write metadata cookie: %w", err)
		}
		if err := writeLocalCookie(dataDir, want); err != nil {
			return Cookie{}, fmt.Errorf("write local cookie: %w", err)
		}
		return want, nil
	}
}
