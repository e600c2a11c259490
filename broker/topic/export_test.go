package topic

// StickyHash exposes the Key_Shared slot of a key to the external tests.
var StickyHash = stickyHash
