package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/proto"
)

// globalFlags are the flags of global limits: where Redis is, and how to
// reach it.
type globalFlags struct {
	addrs, masterName, username, password string
	cluster, useTLS                       bool
	caFile, certFile, keyFile, serverName string
	prefix                                string
	timeout                               time.Duration
	waitReplicas                          int
}

func (g *globalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addrs, "global-redis", "", "decide global limits in this Redis: host:port or a Unix socket path; several, comma-separated, are Redis Cluster seeds")
	fs.BoolVar(&g.cluster, "global-cluster", false, "the one --global-redis address is a Redis Cluster seed")
	fs.StringVar(&g.masterName, "global-master-name", "", "the --global-redis addresses are Sentinels monitoring this master")
	fs.StringVar(&g.username, "global-username", "", "Redis ACL user (AUTH username password)")
	fs.StringVar(&g.password, "global-password", "", "Redis password (prefer $SLUICE_GLOBAL_PASSWORD: flags show in ps)")
	fs.BoolVar(&g.useTLS, "global-tls", false, "connect to Redis with TLS")
	fs.StringVar(&g.caFile, "global-tls-ca", "", "PEM file of the CAs that sign Redis's certificate (default: the system's); implies --global-tls")
	fs.StringVar(&g.certFile, "global-tls-cert", "", "PEM client certificate for Redis, with --global-tls-key; implies --global-tls")
	fs.StringVar(&g.keyFile, "global-tls-key", "", "PEM key of --global-tls-cert")
	fs.StringVar(&g.serverName, "global-tls-server-name", "", "the name Redis's certificate must have (default: the address's host)")
	fs.StringVar(&g.prefix, "global-prefix", "sluice:", "the prefix of every Redis key")
	fs.TextVar((*proto.Duration)(&g.timeout), "global-timeout", proto.Duration(global.DefaultTimeout), "the longest a pipeline waits for Redis's reply from its sending (`duration`): a request past it is decided by its outage policy, and 3 in a row are an outage")
	fs.IntVar(&g.waitReplicas, "global-wait-replicas", 0, "answer a decision only once this many replicas hold it (Redis WAIT)")
}

// options returns the global.Options the flags describe, nil without
// --global-redis.
func (g *globalFlags) options() (*global.Options, error) {
	if g.addrs == "" {
		if g.cluster || g.masterName != "" || g.useTLS || g.caFile != "" || g.certFile != "" {
			return nil, fmt.Errorf("--global-* flags need --global-redis")
		}
		return nil, nil
	}
	switch {
	case g.timeout < time.Millisecond || g.timeout > time.Minute:
		return nil, fmt.Errorf("--global-timeout %v: want a duration from 1ms to 1m0s", g.timeout)
	case g.waitReplicas < 0:
		return nil, fmt.Errorf("--global-wait-replicas %d: want 0 or more", g.waitReplicas)
	case (g.certFile == "") != (g.keyFile == ""):
		return nil, fmt.Errorf("--global-tls-cert and --global-tls-key go together")
	}
	var addrs []string
	for _, a := range strings.Split(g.addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	o := &global.Options{Addrs: addrs, Cluster: g.cluster, MasterName: g.masterName,
		Username: g.username, Password: g.password, Prefix: g.prefix, Timeout: g.timeout, WaitReplicas: g.waitReplicas}
	if g.useTLS || g.caFile != "" || g.certFile != "" {
		t := &tls.Config{ServerName: g.serverName, MinVersion: tls.VersionTLS12}
		if g.caFile != "" {
			pem, err := os.ReadFile(g.caFile)
			if err != nil {
				return nil, fmt.Errorf("--global-tls-ca: %w", err)
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--global-tls-ca %s: no PEM certificate in it", g.caFile)
			}
		}
		if g.certFile != "" {
			c, err := tls.LoadX509KeyPair(g.certFile, g.keyFile)
			if err != nil {
				return nil, fmt.Errorf("--global-tls-cert: %w", err)
			}
			t.Certificates = []tls.Certificate{c}
		}
		o.TLS = t
	}
	return o, nil
}

// checkGlobal refuses a config with global limits on a sidecar without
// Redis (haveRedis false): every request on them would fail. The same
// goes for global routes of the Redis-protocol commands.
func checkGlobal(s *config.Set, haveRedis bool) error {
	if haveRedis {
		return nil
	}
	var names []string
	for _, n := range s.Names() {
		if l, _ := s.Lookup(n); l.Scope == config.Global {
			names = append(names, n)
		}
	}
	var routes []string
	for _, r := range s.Routes() {
		if r.Limit.Scope == config.Global {
			routes = append(routes, strconv.Quote(r.Match))
		}
	}
	if len(names) == 0 && len(routes) > 0 {
		return fmt.Errorf("%s: the Redis-protocol keys matching %s are global (resp: scope: global), decided in Redis: give sluiced --global-redis HOST:PORT ($SLUICE_GLOBAL_REDIS), or make the route local", s.Path(), strings.Join(routes, ", "))
	}
	switch len(names) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: the limit %s is global (scope: global), decided in Redis: give sluiced --global-redis HOST:PORT ($SLUICE_GLOBAL_REDIS), or make the limit local", s.Path(), names[0])
	}
	return fmt.Errorf("%s: the limits %s are global (scope: global), decided in Redis: give sluiced --global-redis HOST:PORT ($SLUICE_GLOBAL_REDIS), or make them local", s.Path(), strings.Join(names, ", "))
}
