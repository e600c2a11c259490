package journal

import "github.com/magnetar-io/magnetar/internal/fsutil"

// Removing released journal files: see fsutil.RemoveGradually for why they are shrunk
// step by step rather than unlinked at once.
//
// Release renames the files it removes (deletingExt) and syncs the directory before it
// shrinks them, so a crash in between leaves files that are not journal files, which
// Open deletes, rather than truncated journal files, which would replay as corruption.

const deletingExt = fsutil.DeletingExt
