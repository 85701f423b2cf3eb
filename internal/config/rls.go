package config

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/rls"
)

// The descriptors of Envoy's rate limit service, in envoyproxy/ratelimit's
// format: a file of that format as it is (a top-level domain), or, in a
// Sluice file, a list of such documents under rls. A rate_limit may name a
// limit of the file (limit: NAME) instead of a unit and requests_per_unit.

// RLS returns the rate limit service's domains: nil if the file has none.
func (s *Set) RLS() *rls.Config { return s.rls }

// rlsDomains parses the list under rls: each item one domain.
func (p *parser) rlsDomains(n *yaml.Node, field string) ([]*rls.Domain, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, field, "want a list of domains (domain: NAME, descriptors: [...]), got a %s", kindName(n))
	}
	var ds []*rls.Domain
	for i, item := range n.Content {
		d, err := p.rlsDomain(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// rlsDomain parses one domain: an envoyproxy/ratelimit file's content.
func (p *parser) rlsDomain(n *yaml.Node, field string) (*rls.Domain, error) {
	d := &rls.Domain{}
	err := p.mapping(n, field, func(key, val *yaml.Node, f string) error {
		switch key.Value {
		case "domain":
			return p.str(val, f, &d.Name)
		case "descriptors":
			ds, err := p.rlsDescriptors(val, f)
			d.Descriptors = ds
			return err
		}
		return p.errorf(key, f, "unknown key '%s' (want domain or descriptors)", key.Value)
	})
	if err != nil {
		return nil, err
	}
	if d.Name == "" {
		return nil, p.errorf(n, field, "config file cannot have empty domain")
	}
	return d, nil
}

func (p *parser) rlsDescriptors(n *yaml.Node, field string) ([]*rls.Descriptor, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, field, "want a list of descriptors, got a %s", kindName(n))
	}
	var ds []*rls.Descriptor
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		d := &rls.Descriptor{}
		shadow := false
		err := p.mapping(item, f, func(key, val *yaml.Node, f string) error {
			switch key.Value {
			case "key":
				return p.str(val, f, &d.Key)
			case "value":
				return p.str(val, f, &d.Value)
			case "rate_limit":
				r, err := p.rlsRule(val, f)
				d.Rule = r
				return err
			case "descriptors":
				ch, err := p.rlsDescriptors(val, f)
				d.Descriptors = ch
				return err
			case "shadow_mode":
				return p.boolean(val, f, &shadow)
			case "share_threshold":
				return p.boolean(val, f, &d.ShareThreshold)
			case "quota_mode":
				var b bool
				if err := p.boolean(val, f, &b); err != nil {
					return err
				}
				if b {
					return p.errorf(val, f, "quota mode is not supported: remove it, or set it to false")
				}
				return nil
			case "detailed_metric", "value_to_metric":
				var b bool
				return p.boolean(val, f, &b) // metrics' names only: nothing to decide
			case "metadata":
				return nil // returned by envoyproxy/ratelimit as dynamic metadata only when asked: not here
			}
			return p.errorf(key, f, "unknown key '%s' (want key, value, rate_limit, descriptors, shadow_mode, share_threshold, quota_mode, detailed_metric, value_to_metric or metadata)", key.Value)
		})
		if err != nil {
			return nil, err
		}
		if d.Key == "" {
			return nil, p.errorf(item, f, "descriptor has empty key")
		}
		if d.Rule != nil {
			d.Rule.Shadow = shadow
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// rlsRule parses a rate_limit.
func (p *parser) rlsRule(n *yaml.Node, field string) (*rls.Rule, error) {
	r := &rls.Rule{}
	err := p.mapping(n, field, func(key, val *yaml.Node, f string) error {
		switch key.Value {
		case "unit":
			var s string
			if err := p.str(val, f, &s); err != nil {
				return err
			}
			u, ok := rls.ParseUnit(s)
			if !ok {
				return p.errorf(val, f, "invalid rate limit unit '%s'", s)
			}
			r.Unit = u
			return nil
		case "requests_per_unit":
			var s string
			if err := p.str(val, f, &s); err != nil {
				return err
			}
			v, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return p.errorf(val, f, "%q: want a whole number from 0 to 4294967295", s)
			}
			r.RequestsPerUnit = uint32(v)
			return nil
		case "unlimited":
			return p.boolean(val, f, &r.Unlimited)
		case "name":
			return p.str(val, f, &r.Name)
		case "limit":
			return p.str(val, f, &r.Limit)
		case "replaces":
			if val.Kind != yaml.SequenceNode {
				return p.errorf(val, f, "want a list of {name: NAME}")
			}
			for i, item := range val.Content {
				var name string
				err := p.mapping(item, fmt.Sprintf("%s[%d]", f, i), func(k, v *yaml.Node, f string) error {
					if k.Value != "name" {
						return p.errorf(k, f, "unknown key '%s' (want name)", k.Value)
					}
					return p.str(v, f, &name)
				})
				if err != nil {
					return err
				}
				if name == "" {
					return p.errorf(item, f, "should not have an empty replaces entry")
				}
				r.Replaces = append(r.Replaces, name)
			}
			return nil
		}
		return p.errorf(key, f, "unknown key '%s' (want unit, requests_per_unit, unlimited, name, replaces or limit)", key.Value)
	})
	if err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, p.errorf(n, field, "%v", err)
	}
	return r, nil
}

// rlsConfig indexes the domains of the file and checks that the limits
// they name are limits of the file that can decide a descriptor.
func (p *parser) rlsConfig(s *Set, ds []*rls.Domain, at *yaml.Node, field string) error {
	c, err := rls.NewConfig(ds)
	if err != nil {
		return p.errorf(at, field, "%v", err)
	}
	for _, name := range c.LimitNames() {
		l, ok := s.limits[name]
		switch {
		case !ok:
			return p.errorf(at, field, "a rate_limit names the limit %q, which the file does not define", name)
		case l.Bucket.Algorithm == bucket.Concurrency:
			return p.errorf(at, field, "a rate_limit names the limit %q, a concurrency limit, which takes leases and cannot decide a descriptor", name)
		case len(l.More) > 0:
			return p.errorf(at, field, "a rate_limit names the limit %q, a list of limits, which cannot decide a descriptor: give each descriptor one limit", name)
		case l.Overrides.Len() > 0:
			return p.errorf(at, field, "a rate_limit names the limit %q, which has overrides: a descriptor's bucket has no request key for them to match", name)
		}
	}
	s.rls = c
	return nil
}

// ImportRLS parses the content of an envoyproxy/ratelimit file (a domain
// at the top), checking it as Parse does, and returns its domain: what
// "sluice config import" writes out as a Sluice config file's rls item.
// file names it in errors.
func ImportRLS(file string, data []byte) (*rls.Domain, error) {
	p := parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, p.yamlError(err, data)
	}
	if len(doc.Content) == 0 || !isRLSFile(doc.Content[0]) {
		return nil, p.errorf(nil, "", "not an envoyproxy/ratelimit file: want a domain and its descriptors at the top")
	}
	root := doc.Content[0]
	d, err := p.rlsDomain(root, "")
	if err != nil {
		return nil, err
	}
	if err := p.rlsConfig(&Set{limits: map[string]*Limit{}}, []*rls.Domain{d}, root, ""); err != nil {
		return nil, err
	}
	return d, nil
}
