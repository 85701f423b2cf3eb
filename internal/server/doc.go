// Package server is the sidecar: it owns the state file, keeps it synced, and
// shuts down cleanly. Run is the whole lifecycle; cmd/sluiced only turns
// flags into a Config.
//
// # Durability
//
// Every decision is written to the shared mapping before it is answered, so
// it survives the process being killed. The table is synced to disk every
// Config.SyncInterval (msync, MS_SYNC); an OS crash or power loss loses at
// most that much. On shutdown the table is synced and marked clean, so the
// next start serves it without a scan.
package server
