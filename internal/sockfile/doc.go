// Package sockfile binds the Unix sockets sluiced listens on, all under
// the same rules: the native and Redis protocols' sockets and the metrics
// socket.
//
//   - The path fits sun_path (MaxPath bytes), and its directory, created
//     0750 if missing, is not writable by every user (unless sticky).
//   - An instance lock (an flock on PATH.lock) is taken first, so a live
//     socket is never removed: a second sluiced on the same path is
//     refused with ErrInUse, which names the path. The lock's file is
//     removed with the socket (Remove), the lock still held: a process
//     that took the lock on the removed file sees so and locks afresh. With the lock held, a socket file left at the
//     path by a crashed instance is stale and is replaced; one that still
//     answers belongs to a process that is not sluiced and is left alone
//     (ErrInUse); anything else at the path is left alone too (ErrPath).
//   - The socket has the mode asked for whatever the process umask: it is
//     bound under a temporary name beside the path, given its mode, and
//     renamed into place, so it is never reachable at the path with the
//     umask's permissions.
//
// # Concurrency
//
// A Listener is a *net.UnixListener: Accept and Close from any goroutine.
// Remove, once, after Close.
package sockfile
