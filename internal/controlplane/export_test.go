package controlplane

// Partition names what a Storage read answers, so an external test can
// wrap a Storage.
type Partition = partition
