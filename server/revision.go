package server

// StoreRevision is the store revision the snapshot compiles (the
// Kubernetes source names it in the policies' status).
func (s *Snapshot) StoreRevision() uint64 { return s.Revision }
