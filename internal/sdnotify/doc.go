// Package sdnotify tells systemd about the service's state: the
// sd_notify(3) protocol of a Type=notify unit, without libsystemd.
//
// # Format
//
// Each message is one datagram of newline-separated VARIABLE=value
// assignments ("READY=1\nSTATUS=serving"), sent to the unixgram socket
// named by $NOTIFY_SOCKET: a path, or an abstract address written with a
// leading '@'. The command reads the variable and passes it to New; an empty
// one (not run by systemd) makes every call a no-op.
//
// # Concurrency
//
// A Notifier is safe for concurrent use.
package sdnotify
