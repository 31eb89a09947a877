package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/imagedata"
	"github.com/arbiter-pdp/arbiter/imageverify"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// The config file sections that are not flags.
const (
	configAuthorizationKey = "authorization"
	configCalloutKey       = "callout"
	configImageDataKey     = "imageData"
	// configImageVerificationKey configures serve's image verifier
	// (docs/image-verification.md).
	configImageVerificationKey = "imageVerification"
)

// configSections are the sections of a config file that are not flags.
type configSections struct {
	authorization *authz.Config
	// callout configures http.* and resource.Post (docs/context.md).
	callout *callout.Config
	// imageData configures image.GetMetadata's registry access.
	imageData *imagedata.Config
	// imageVerification configures ImageValidatingPolicies' image verifier.
	imageVerification *imageverify.Config
}

// decodeSection decodes a config file section strictly (unknown fields
// are errors naming them).
func decodeSection(path, key string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return exitWith(exitLoad, "--config %s: %s: %v", path, key, err)
	}
	return nil
}

// applyConfigFile reads a YAML config file whose keys are the command's
// flag names, and sets every flag not given on the command line from it
// (so flags override the file). Lists set repeatable flags. The
// authorization section is returned.
func applyConfigFile(cmd *cobra.Command, path string) (*authz.Config, error) {
	sec, err := applyConfigSections(cmd, path)
	if err != nil {
		return nil, err
	}
	return sec.authorization, nil
}

// applyConfigSections is applyConfigFile returning every section that is
// not a flag: authorization, callout, imageData and imageVerification.
func applyConfigSections(cmd *cobra.Command, path string) (*configSections, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, exitWith(exitLoad, "--config: %v", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, exitWith(exitLoad, "--config %s: %v", path, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, exitWith(exitLoad, "--config %s: the file must be a map of flag names to values: %v", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sec := &configSections{}
	for _, k := range keys {
		v := doc[k]
		switch k {
		case configAuthorizationKey:
			az := &authz.Config{}
			if err := decodeSection(path, k, v, az); err != nil {
				return nil, err
			}
			if err := az.Validate(); err != nil {
				return nil, exitWith(exitLoad, "--config %s: %v", path, err)
			}
			sec.authorization = az
			continue
		case configCalloutKey:
			c := &callout.Config{}
			if err := decodeSection(path, k, v, c); err != nil {
				return nil, err
			}
			if err := c.Validate(); err != nil {
				return nil, exitWith(exitLoad, "--config %s: callout: %v", path, err)
			}
			sec.callout = c
			continue
		case configImageDataKey:
			c := &imagedata.Config{}
			if err := decodeSection(path, k, v, c); err != nil {
				return nil, err
			}
			if err := c.Validate(); err != nil {
				return nil, exitWith(exitLoad, "--config %s: imageData: %v", path, err)
			}
			sec.imageData = c
			continue
		case configImageVerificationKey:
			c := &imageverify.Config{}
			if err := decodeSection(path, k, v, c); err != nil {
				return nil, err
			}
			if err := c.Validate(); err != nil {
				return nil, exitWith(exitLoad, "--config %s: %s: %v", path, k, err)
			}
			sec.imageVerification = c
			continue
		}
		if k == "config" {
			return nil, exitWith(exitLoad, "--config %s: config: a config file cannot name another", path)
		}
		fl := cmd.Flags().Lookup(k)
		if fl == nil {
			return nil, exitWith(exitLoad, "--config %s: unknown key %q (keys are the flags of %s, and authorization, callout, imageData, imageVerification)", path, k, cmd.Name())
		}
		if fl.Changed {
			continue // the command line wins
		}
		if err := setFlag(fl, v); err != nil {
			return nil, exitWith(exitLoad, "--config %s: %s: %v", path, k, err)
		}
	}
	return sec, nil
}

func setFlag(fl *pflag.Flag, v json.RawMessage) error {
	var val any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return err
	}
	if list, ok := val.([]any); ok {
		sv, ok := fl.Value.(pflag.SliceValue)
		if !ok {
			return fmt.Errorf("takes one value, not a list")
		}
		items := make([]string, len(list))
		for i, e := range list {
			s, err := scalar(e)
			if err != nil {
				return err
			}
			items[i] = s
		}
		return sv.Replace(items)
	}
	s, err := scalar(val)
	if err != nil {
		return err
	}
	if sv, ok := fl.Value.(pflag.SliceValue); ok {
		return sv.Replace([]string{s})
	}
	return fl.Value.Set(s)
}

func scalar(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case json.Number:
		return t.String(), nil
	case bool:
		return strconv.FormatBool(t), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("%v is not a scalar value", v)
}
