package bookie

import "github.com/cockroachdb/pebble/v2/vfs"

// SetStorageFS makes the bookie's storage use fs (tests inject disk failures).
func SetStorageFS(c *Config, fs vfs.FS) { c.storageFS = fs }
