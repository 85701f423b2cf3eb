package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/proto"
)

// importHeader heads what "config import" prints.
const importHeader = `A Sluice config file, imported from %s (an envoyproxy/ratelimit file)
by "sluice config import". It decides as that file does: a rate_limit of a
unit and requests_per_unit is a fixed window aligned to the Unix epoch (the
comment beside it is that window as a limit spec). To decide a descriptor by
another algorithm, define a limit under limits (any spec, local or global)
and name it instead: rate_limit: {limit: NAME}. More domains go in the rls
list. See docs/envoy.md.`

// importRLS runs "config import FILE": print the Sluice config file that
// decides as the envoyproxy/ratelimit file FILE does.
func importRLS(x *cli, path string) int {
	data, err := readConfigFile(path)
	if err == nil {
		var d *rls.Domain
		if d, err = config.ImportRLS(path, data); err == nil {
			var out bytes.Buffer
			enc := yaml.NewEncoder(&out)
			enc.SetIndent(2)
			if err = enc.Encode(importedDoc(path, d)); err == nil {
				x.stdout.Write(out.Bytes())
				return exitOK
			}
		}
	}
	fmt.Fprintln(x.stderr, "sluice: config import: "+err.Error())
	return exitInvalid
}

// readConfigFile reads a config file of at most config.MaxFileSize bytes.
func readConfigFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case fi.Size() > config.MaxFileSize:
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a config file may have", path, fi.Size(), config.MaxFileSize)
	}
	return os.ReadFile(path)
}

// importedDoc is the Sluice config file of domain d, imported from path.
func importedDoc(path string, d *rls.Domain) *yaml.Node {
	limitsKey := str("limits")
	limitsKey.HeadComment = fmt.Sprintf(importHeader, path)
	domain := mapping(false, str("domain"), str(d.Name))
	if len(d.Descriptors) > 0 {
		domain.Content = append(domain.Content, str("descriptors"), descriptorNodes(d.Descriptors))
	}
	return mapping(false,
		limitsKey, mapping(true),
		str("rls"), &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{domain}})
}

// descriptorNodes is a list of descriptors as a config file writes it.
func descriptorNodes(ds []*rls.Descriptor) *yaml.Node {
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, d := range ds {
		n := mapping(false, str("key"), str(d.Key))
		if d.Value != "" {
			n.Content = append(n.Content, str("value"), str(d.Value))
		}
		if r := d.Rule; r != nil {
			rule, comment := ruleNode(r)
			key := str("rate_limit")
			rule.LineComment = comment
			n.Content = append(n.Content, key, rule)
			if r.Shadow {
				n.Content = append(n.Content, str("shadow_mode"), boolean(true))
			}
		}
		if d.ShareThreshold {
			n.Content = append(n.Content, str("share_threshold"), boolean(true))
		}
		if len(d.Descriptors) > 0 {
			n.Content = append(n.Content, str("descriptors"), descriptorNodes(d.Descriptors))
		}
		list.Content = append(list.Content, n)
	}
	return list
}

// ruleNode is a rate_limit as a config file writes it, and the comment
// that says what it decides.
func ruleNode(r *rls.Rule) (*yaml.Node, string) {
	n := mapping(true)
	comment := ""
	switch {
	case r.Unlimited:
		n.Content = append(n.Content, str("unlimited"), boolean(true))
	case r.Limit != "":
		n.Content = append(n.Content, str("limit"), str(r.Limit))
	default:
		n.Content = append(n.Content, str("unit"), str(strings.ToLower(r.Unit.String())),
			str("requests_per_unit"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(r.RequestsPerUnit), 10)})
		comment = "every request denied"
		if r.RequestsPerUnit > 0 {
			window := time.Duration(rls.UnitSeconds(r.Unit)) * time.Second
			comment = proto.FixedWindowLimit(int64(r.RequestsPerUnit), window).String()
		}
	}
	if r.Name != "" {
		n.Content = append(n.Content, str("name"), str(r.Name))
	}
	if len(r.Replaces) > 0 {
		rep := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, name := range r.Replaces {
			rep.Content = append(rep.Content, mapping(true, str("name"), str(name)))
		}
		n.Content = append(n.Content, str("replaces"), rep)
	}
	return n, comment
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// mapping is a mapping of the key and value nodes kv, in flow style ({a:
// b}) if flow.
func mapping(flow bool, kv ...*yaml.Node) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Content: kv}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}
