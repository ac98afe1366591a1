package check

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

const chartDir = "../helm/toolgate"

// kubeVersion is the cluster version the chart is rendered for: the first
// with pod user namespaces and procMount on by default, which the
// worker's sandbox uses.
const kubeVersion = "v1.33.0"

// valueSets are the values files CI renders the chart with: the defaults,
// and the production set-up of deploy/README.md. External are the objects
// the release expects to exist (created by the README's steps), which
// the rendered objects may name without rendering them.
var valueSets = []struct {
	name     string
	files    []string
	external []string
}{
	{"default", nil, []string{"Secret/toolgate-worker-creds", "Secret/toolgate-approver-creds"}},
	{"production", []string{"../helm/production-values.yaml"}, []string{
		"Secret/toolgate-worker-creds", "Secret/toolgate-approver-creds", "Secret/toolgate-approver-tokens",
		"ConfigMap/toolgate-policy", "Secret/approvals-tls"}},
}

func chartValues(t *testing.T, files []string) map[string]any {
	t.Helper()
	vals, err := (&values.Options{ValueFiles: files}).MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// TestHelmLint is `helm lint` with each values file: no error; the only
// warning allowed is the NATS dependency not being downloaded.
func TestHelmLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, chartValues(t, vs.files), "toolgate", kv)
			for _, m := range l.Messages {
				t.Logf("%s", m)
				if m.Severity >= support.WarningSev && !strings.Contains(m.Err.Error(), "missing these dependencies: nats") {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// render is `helm template toolgate deploy/helm/toolgate -f FILES
// --kube-version ...`: Helm's install action in client-only dry-run mode.
func render(t *testing.T, files []string) string {
	t.Helper()
	m, err := tryRender(t, files)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return m
}

func tryRender(t *testing.T, files []string) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = "toolgate", "toolgate", kv
	inst.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := inst.Run(ch, chartValues(t, files))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "\n---\n%s\n", h.Manifest)
	}
	return b.String(), nil
}

// decoder decodes strictly: an unknown or duplicated field is an error, as
// the API server's strict field validation makes it.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// objects splits a rendered manifest and decodes each document into its
// API type.
func objects(t *testing.T, manifest string) []runtime.Object {
	t.Helper()
	dec := decoder(t)
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if gvk.Kind == "" || gvk.Version == "" {
			t.Fatalf("no kind or apiVersion:\n%s", doc)
		}
		out = append(out, obj)
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// TestHelmTemplate renders the chart with each values file, decodes every
// object strictly into the Kubernetes API types, and checks that the
// objects fit together and keep the chart's promises.
func TestHelmTemplate(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			manifest := render(t, vs.files)
			if dir := os.Getenv("TOOLGATE_RENDER_DIR"); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, vs.name+".yaml"), []byte(manifest), 0o644)
			}
			objs := objects(t, manifest)
			checkObjects(t, vs.name, objs, vs.external)
		})
	}
}

type fleet struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	kinds       map[string]bool // Kind/name of every object
	counts      map[string]int  // objects per kind
}

func checkObjects(t *testing.T, name string, objs []runtime.Object, external []string) {
	f := fleet{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{}, kinds: map[string]bool{}, counts: map[string]int{}}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		f.counts[kind]++
		switch v := o.(type) {
		case *appsv1.Deployment:
			f.deployments[v.Name] = v
			f.kinds["Deployment/"+v.Name] = true
		case *corev1.Service:
			f.services[v.Name] = v
			f.kinds["Service/"+v.Name] = true
		case *corev1.ConfigMap:
			f.kinds["ConfigMap/"+v.Name] = true
		case *corev1.Secret:
			t.Errorf("the chart renders Secret %s: credentials come from Secrets people create", v.Name)
		}
	}
	for _, e := range external {
		f.kinds[e] = true
	}
	want := map[string]int{"Deployment": 2, "Service": 2, "PodDisruptionBudget": 1, "ServiceAccount": 1}
	if name == "production" {
		want = map[string]int{"Deployment": 2, "Service": 2, "PodDisruptionBudget": 2, "ServiceAccount": 1,
			"HorizontalPodAutoscaler": 1, "Ingress": 1, "ServiceMonitor": 1}
	}
	for k, n := range want {
		if f.counts[k] != n {
			t.Errorf("%d %s objects, want %d (all: %v)", f.counts[k], k, n, f.counts)
		}
	}
	for _, d := range f.deployments {
		checkDeployment(t, d, f)
	}
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Service:
			d := f.selecting(t, "Service "+v.Name, v.Spec.Selector)
			for _, p := range v.Spec.Ports {
				if p.TargetPort.Type == intstr.String && !hasPort(d, p.TargetPort.StrVal) {
					t.Errorf("Service %s: targetPort %s is no port of %s", v.Name, p.TargetPort.StrVal, d.Name)
				}
			}
		case *policyv1.PodDisruptionBudget:
			f.selecting(t, "PodDisruptionBudget "+v.Name, v.Spec.Selector.MatchLabels)
		case *autoscalingv2.HorizontalPodAutoscaler:
			d, ok := f.deployments[v.Spec.ScaleTargetRef.Name]
			if !ok || v.Spec.ScaleTargetRef.Kind != "Deployment" {
				t.Errorf("HPA %s scales %v, no rendered Deployment", v.Name, v.Spec.ScaleTargetRef)
			} else if d.Spec.Replicas != nil {
				t.Errorf("Deployment %s sets replicas although the HPA %s scales it", d.Name, v.Name)
			}
			if len(v.Spec.Metrics) == 0 || v.Spec.Metrics[0].External == nil || v.Spec.Metrics[0].External.Metric.Name != "toolgate_calls_waiting" {
				t.Errorf("HPA %s does not scale on toolgate_calls_waiting: %+v", v.Name, v.Spec.Metrics)
			}
		case *networkingv1.Ingress:
			for _, r := range v.Spec.Rules {
				for _, p := range r.HTTP.Paths {
					s, ok := f.services[p.Backend.Service.Name]
					if !ok || !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == p.Backend.Service.Port.Name }) {
						t.Errorf("Ingress %s: backend %+v is no rendered Service port", v.Name, p.Backend.Service)
					}
				}
			}
			for _, tls := range v.Spec.TLS {
				if !f.kinds["Secret/"+tls.SecretName] {
					t.Errorf("Ingress %s: TLS Secret %s is neither rendered nor documented", v.Name, tls.SecretName)
				}
			}
		case *monitoringv1.ServiceMonitor:
			sel, err := metaSelector(v.Spec.Selector.MatchLabels)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range f.services {
				if sel.Matches(labels.Set(s.Labels)) && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
					n++
				}
			}
			if n != 2 {
				t.Errorf("ServiceMonitor %s selects %d Services with a metrics port, want the workers' and the approver's", v.Name, n)
			}
		}
	}
}

func metaSelector(m map[string]string) (labels.Selector, error) {
	return labels.ValidatedSelectorFromSet(m)
}

// selecting returns the one Deployment whose pods selector matches.
func (f fleet) selecting(t *testing.T, what string, selector map[string]string) *appsv1.Deployment {
	t.Helper()
	var found []*appsv1.Deployment
	for _, d := range f.deployments {
		if len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s selects %d Deployments' pods, want 1", what, len(found))
	}
	return found[0]
}

func hasPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, f fleet) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Deployment %s: selector %v does not match its pods %v", d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("Deployment %s: pods may run as root", d.Name)
	}
	for _, c := range pod.Containers {
		where := d.Name + "/" + c.Name
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no securityContext", where)
			continue
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s: privileged", where)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: privilege escalation allowed", where)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: capabilities %+v, want all dropped and none added", where, sc.Capabilities)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: writable root filesystem", where)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v, want cpu and memory requests and a memory limit", where, c.Resources)
		}
		for probe, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s: no HTTP %s probe", where, probe)
				continue
			}
			if want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[probe]; p.HTTPGet.Path != want {
				t.Errorf("%s: %s probe on %s, want %s", where, probe, p.HTTPGet.Path, want)
			}
			if !hasPort(d, p.HTTPGet.Port.StrVal) {
				t.Errorf("%s: %s probe on port %s, no port of the container", where, probe, p.HTTPGet.Port.String())
			}
		}
		mounted := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
		}
		for _, v := range pod.Volumes {
			if !mounted[v.Name] {
				t.Errorf("%s: volume %s is not mounted", where, v.Name)
			}
			switch {
			case v.Secret != nil && !f.kinds["Secret/"+v.Secret.SecretName]:
				t.Errorf("%s: Secret %s is neither rendered nor documented", where, v.Secret.SecretName)
			case v.ConfigMap != nil && !f.kinds["ConfigMap/"+v.ConfigMap.Name]:
				t.Errorf("%s: ConfigMap %s is neither rendered nor documented", where, v.ConfigMap.Name)
			}
		}
		for _, need := range []string{"/tmp", "/var/lib/toolgate"} {
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == need }) {
				t.Errorf("%s: nothing writable at %s under a read-only root", where, need)
			}
		}
		if c.Name == "worker" {
			checkWorkerSandbox(t, where, pod, c)
		}
	}
}

// checkWorkerSandbox: the worker's container gets exactly what bubblewrap
// needs (deploy/README.md, "The sandbox in a pod") and the worker refuses
// to start without a sandbox.
func checkWorkerSandbox(t *testing.T, where string, pod corev1.PodSpec, c corev1.Container) {
	sc := c.SecurityContext
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccomp %+v: the runtime's default profile refuses the namespaces bwrap creates", where, sc.SeccompProfile)
	}
	if sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount || pod.HostUsers == nil || *pod.HostUsers {
		t.Errorf("%s: procMount %v, hostUsers %v: bwrap mounts a /proc, which a masked /proc forbids", where, sc.ProcMount, pod.HostUsers)
	}
	if !slices.Contains(c.Args, "--sandbox=require") {
		t.Errorf("%s: args %v lack --sandbox=require", where, c.Args)
	}
	if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--nats=nats://") }) {
		t.Errorf("%s: args %v name no NATS URL", where, c.Args)
	}
}

// TestStrictDecodingRefusesMistakes: the validation above is worth
// something only if a misspelt field, a wrong type or an unknown kind
// fails it.
func TestStrictDecodingRefusesMistakes(t *testing.T) {
	dec := decoder(t)
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicaz: 2\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: eighty}]\n",
		"unknown kind":  "apiVersion: v1\nkind: Deploymnet\nmetadata: {name: x}\n",
		"nested field":  "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i, securityContext: {procMonut: Unmasked}}]\n",
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without error:\n%s", name, doc)
		}
	}
}

// TestHelmValuesSchema: a misspelt or mistyped value fails the render
// (values.schema.json) instead of being ignored.
func TestHelmValuesSchema(t *testing.T) {
	for name, file := range map[string]string{
		"misspelt key": "worker:\n  replica: 3\n",
		"wrong type":   "worker:\n  autoscaling:\n    enabled: \"yes\"\n",
		"bad sandbox":  "worker:\n  sandbox: sometimes\n",
	} {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := tryRender(t, []string{p}); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: render error %v, want the values schema's", name, err)
		}
	}
}
