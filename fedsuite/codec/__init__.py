"""Named arrays to and from Flower's messages, and .npy bytes without copies."""
