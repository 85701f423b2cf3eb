package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
)

// The overrides file: the overrides "sluice override set" gives at run
// time, beside the config file (OverridesPath), so they outlive a restart
// without an edit of the config file. It maps a limit's name to its
// overrides, as a limit's overrides field does:
//
//	api:
//	  "tenant:acme": "quota:limit=10000,period=day,tz=America/New_York"
//
// Its overrides replace the config file's of the same limit and key. The
// sidecar reads it with the config file, reloads it as it does the file,
// and refuses both if either is invalid.

// OverridesPath returns the path of the overrides file of the config file
// at path: its name with ".overrides" before the extension
// ("sluice.yaml": "sluice.overrides.yaml").
func OverridesPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + ".overrides" + ext
}

// readOverrides reads the overrides file of the config file at path: nil
// if there is none.
func readOverrides(ctx context.Context, path string, timeout time.Duration, busy *atomic.Bool, read func(string) ([]byte, error)) ([]byte, error) {
	data, err := readWithin(ctx, OverridesPath(path), timeout, busy, read)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// applyOverrides adds the overrides of the overrides file, content side,
// to s's limits, replacing those of the same key.
func (s *Set) applyOverrides(file string, side []byte) error {
	p := parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(side, &doc); err != nil {
		return p.yamlError(err, side)
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	return p.mapping(doc.Content[0], "", func(k, v *yaml.Node, field string) error {
		l, ok := s.limits[k.Value]
		if !ok {
			return p.errorf(k, field, "no limit of that name in the config file")
		}
		if s.rls != nil && slices.Contains(s.rls.LimitNames(), k.Value) {
			return p.errorf(k, field, "a rate_limit of the rls section names this limit: a descriptor's bucket has no request key for an override to match")
		}
		return p.mapping(v, field, func(key, val *yaml.Node, f string) error {
			return p.override(l, key, val, f, true)
		})
	})
}

// SetOverride gives key, under the limit name of the config file at path,
// the limit spec (or, with spec "", removes the override key has there),
// in the overrides file, and reports whether key had one. It first checks
// that the config file and the new overrides load, and then replaces the
// file at once (a sidecar never reads it half-written).
func SetOverride(path, name, key, spec string) (existed bool, err error) {
	data, err := readWithin(context.Background(), path, 0, nil, readFile)
	if err != nil {
		return false, err
	}
	side, err := readOverrides(context.Background(), path, 0, nil, readFile)
	if err != nil {
		return false, err
	}
	all := map[string]map[string]any{}
	if err := yaml.Unmarshal(side, &all); err != nil {
		return false, fmt.Errorf("%s: %w", OverridesPath(path), err)
	}
	_, existed = all[name][key]
	switch {
	case spec != "":
		if all[name] == nil {
			all[name] = map[string]any{}
		}
		all[name][key] = spec
	case existed:
		delete(all[name], key)
		if len(all[name]) == 0 {
			delete(all, name)
		}
	default:
		return false, nil
	}
	out, err := yaml.Marshal(all)
	if err != nil {
		return existed, err
	}
	out = append([]byte("# The overrides of "+filepath.Base(path)+", written by sluice override set and unset.\n"), out...)
	if _, err := ParseWith(path, data, out); err != nil {
		return existed, err
	}
	return existed, writeAtomic(OverridesPath(path), out)
}

// writeAtomic replaces the file at path with data: written beside it,
// then renamed over it.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
