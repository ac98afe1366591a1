package release

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// In-toto statement and SLSA provenance v1 types, as much of them as a
// release fills (https://in-toto.io/Statement/v1,
// https://slsa.dev/provenance/v1).
type (
	statement struct {
		Type          string         `json:"_type"`
		Subject       []subject      `json:"subject"`
		PredicateType string         `json:"predicateType"`
		Predicate     slsaProvenance `json:"predicate"`
	}
	subject struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	}
	slsaProvenance struct {
		BuildDefinition struct {
			BuildType            string         `json:"buildType"`
			ExternalParameters   map[string]any `json:"externalParameters"`
			InternalParameters   map[string]any `json:"internalParameters,omitempty"`
			ResolvedDependencies []resource     `json:"resolvedDependencies,omitempty"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
			Metadata struct {
				StartedOn  string `json:"startedOn,omitempty"`
				FinishedOn string `json:"finishedOn,omitempty"`
			} `json:"metadata"`
		} `json:"runDetails"`
	}
	resource struct {
		URI    string            `json:"uri"`
		Digest map[string]string `json:"digest"`
	}
)

// Provenance's identifiers.
const (
	StatementType  = "https://in-toto.io/Statement/v1"
	PredicateType  = "https://slsa.dev/provenance/v1"
	BuildType      = "https://github.com/toolgate/toolgate/deploy/check/release@v1"
	SourceURI      = "git+https://github.com/toolgate/toolgate"
	DefaultBuilder = "https://github.com/toolgate/toolgate/deploy/check/cmd/release"
)

// provenanceRun is what a build knows of itself for its provenance.
type provenanceRun struct {
	version   string
	platforms []Platform
	goVersion string
	commit    string
	started   time.Time
}

// writeProvenance writes an in-toto statement of SLSA provenance for the
// archives in dir: their SHA-256, the source commit, the build's
// parameters and the toolchain. SHA256SUMS lists it, so its signature
// covers it.
func writeProvenance(path, dir string, archives []string, r provenanceRun) error {
	st := statement{Type: StatementType, PredicateType: PredicateType}
	for _, a := range archives {
		sum, err := sha256File(filepath.Join(dir, a))
		if err != nil {
			return err
		}
		st.Subject = append(st.Subject, subject{Name: a, Digest: map[string]string{"sha256": sum}})
	}
	var plats []string
	for _, p := range r.platforms {
		plats = append(plats, p.OS+"/"+p.Arch)
	}
	bd := &st.Predicate.BuildDefinition
	bd.BuildType = BuildType
	bd.ExternalParameters = map[string]any{"version": r.version, "platforms": plats, "commands": Commands}
	bd.InternalParameters = map[string]any{"goVersion": r.goVersion, "env": map[string]string{"CGO_ENABLED": "0"},
		"flags": []string{"-trimpath", "-buildvcs=auto"}}
	src := resource{URI: SourceURI, Digest: map[string]string{}}
	if r.commit != "" {
		src.Digest["gitCommit"] = r.commit
	}
	if Tagged(r.version) {
		src.URI += "@refs/tags/" + r.version
	}
	bd.ResolvedDependencies = []resource{src}
	rd := &st.Predicate.RunDetails
	rd.Builder.ID = DefaultBuilder
	rd.Metadata.StartedOn = r.started.Format(time.RFC3339)
	rd.Metadata.FinishedOn = time.Now().UTC().Format(time.RFC3339)
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
