package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/imageverify"
)

// imageVerifierFlags are the flags of the commands that evaluate
// ImageValidatingPolicies locally (apply, decide, test).
type imageVerifierFlags struct {
	config string
	off    bool
}

func (f *imageVerifierFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.config, "image-verification-config", "", "YAML file of the image verifier of ImageValidatingPolicies (timeouts, caches, insecureRegistries, dockerConfig, trustedRoot; docs/image-verification.md)")
	fs.BoolVar(&f.off, "no-image-verification", false, "do not reach registries: ImageValidatingPolicies that read images are errors")
}

// verifier builds the image verifier: registries are reached as Kyverno's
// CLI reaches them (ImageValidatingPolicies always read their images),
// over HTTPS unless insecureRegistries say otherwise; Sigstore trust roots
// only from the configuration.
func (f *imageVerifierFlags) verifier() (*imageverify.Verifier, error) {
	return f.build(nil, imageverify.Options{})
}

// build is verifier with the configuration of a config file's
// imageVerification section (nil: none), which --image-verification-config
// cannot be given with, and the verifier's collaborators.
func (f *imageVerifierFlags) build(section *imageverify.Config, opts imageverify.Options) (*imageverify.Verifier, error) {
	if f.off {
		if section != nil {
			return nil, exitWith(exitLoad, "--no-image-verification: the config file has an %s section", configImageVerificationKey)
		}
		return nil, nil
	}
	var cfg imageverify.Config
	what := "--image-verification-config " + f.config
	switch {
	case f.config != "" && section != nil:
		return nil, exitWith(exitLoad, "--image-verification-config and the config file's %s section both configure the image verifier: give one", configImageVerificationKey)
	case section != nil:
		cfg, what = *section, "--config: "+configImageVerificationKey
	case f.config != "":
		data, err := os.ReadFile(f.config)
		if err != nil {
			return nil, exitWith(exitLoad, "--image-verification-config: %v", err)
		}
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return nil, exitWith(exitLoad, "--image-verification-config %s: %v", f.config, err)
		}
	}
	v, err := imageverify.New(cfg, opts)
	if err != nil {
		return nil, exitWith(exitLoad, "%s", fmt.Sprintf("%s: %v", what, err))
	}
	return v, nil
}
