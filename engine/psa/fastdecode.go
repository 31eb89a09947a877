package psa

import (
	"errors"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod Security reads a Pod's annotations and a few fields of its spec and
// containers. Decoding a whole Pod (or its JSON round trip) costs most of
// an evaluation, so a Pod or pod template is decoded through a projection
// that keeps only what the checks read (and the images, which decide
// whether an update is checked): project gives it as JSON-shaped data, and
// fastDecode decodes it straight from the object without building it. A
// value of an unexpected type makes fastDecode give up (errSlow); the
// projection is then decoded as the API server's JSON decoder decodes it,
// which reports the error as it would. The two agree on every input
// fastDecode accepts (TestFastDecodeMatchesJSON).
//
// A value of the wrong type outside the projection is not Pod Security's
// concern: the API server refuses such an object before admission.

var errSlow = errors.New("not handled by the fast decoder")

// The projection's schema.
var (
	podSpecKeys = []string{"hostNetwork", "hostPID", "hostIPC", "hostUsers", "runtimeClassName", "os",
		"securityContext", "volumes", "containers", "initContainers", "ephemeralContainers"}
	podSecurityContextKeys = []string{"runAsUser", "runAsNonRoot", "seLinuxOptions", "windowsOptions",
		"seccompProfile", "appArmorProfile", "sysctls"}
	securityContextKeys = []string{"privileged", "allowPrivilegeEscalation", "capabilities", "procMount",
		"runAsUser", "runAsNonRoot", "seLinuxOptions", "windowsOptions", "seccompProfile", "appArmorProfile"}
	containerKeys = []string{"name", "image", "securityContext", "ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle"}
	probeKeys     = []string{"httpGet", "tcpSocket"}
	lifecycleKeys = []string{"postStart", "preStop"}
	hostKeys      = []string{"host"}
	portKeys      = []string{"hostPort"}
)

// volumeSources are the volume types (VolumeSource's fields): a volume
// keeps the name and the presence of its source (the checks read no more).
var volumeSources = map[string]func(*corev1.VolumeSource){
	"hostPath":              func(v *corev1.VolumeSource) { v.HostPath = &corev1.HostPathVolumeSource{} },
	"emptyDir":              func(v *corev1.VolumeSource) { v.EmptyDir = &corev1.EmptyDirVolumeSource{} },
	"gcePersistentDisk":     func(v *corev1.VolumeSource) { v.GCEPersistentDisk = &corev1.GCEPersistentDiskVolumeSource{} },
	"awsElasticBlockStore":  func(v *corev1.VolumeSource) { v.AWSElasticBlockStore = &corev1.AWSElasticBlockStoreVolumeSource{} },
	"gitRepo":               func(v *corev1.VolumeSource) { v.GitRepo = &corev1.GitRepoVolumeSource{} },
	"secret":                func(v *corev1.VolumeSource) { v.Secret = &corev1.SecretVolumeSource{} },
	"nfs":                   func(v *corev1.VolumeSource) { v.NFS = &corev1.NFSVolumeSource{} },
	"iscsi":                 func(v *corev1.VolumeSource) { v.ISCSI = &corev1.ISCSIVolumeSource{} },
	"glusterfs":             func(v *corev1.VolumeSource) { v.Glusterfs = &corev1.GlusterfsVolumeSource{} },
	"persistentVolumeClaim": func(v *corev1.VolumeSource) { v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{} },
	"rbd":                   func(v *corev1.VolumeSource) { v.RBD = &corev1.RBDVolumeSource{} },
	"flexVolume":            func(v *corev1.VolumeSource) { v.FlexVolume = &corev1.FlexVolumeSource{} },
	"cinder":                func(v *corev1.VolumeSource) { v.Cinder = &corev1.CinderVolumeSource{} },
	"cephfs":                func(v *corev1.VolumeSource) { v.CephFS = &corev1.CephFSVolumeSource{} },
	"flocker":               func(v *corev1.VolumeSource) { v.Flocker = &corev1.FlockerVolumeSource{} },
	"downwardAPI":           func(v *corev1.VolumeSource) { v.DownwardAPI = &corev1.DownwardAPIVolumeSource{} },
	"fc":                    func(v *corev1.VolumeSource) { v.FC = &corev1.FCVolumeSource{} },
	"azureFile":             func(v *corev1.VolumeSource) { v.AzureFile = &corev1.AzureFileVolumeSource{} },
	"configMap":             func(v *corev1.VolumeSource) { v.ConfigMap = &corev1.ConfigMapVolumeSource{} },
	"vsphereVolume":         func(v *corev1.VolumeSource) { v.VsphereVolume = &corev1.VsphereVirtualDiskVolumeSource{} },
	"quobyte":               func(v *corev1.VolumeSource) { v.Quobyte = &corev1.QuobyteVolumeSource{} },
	"azureDisk":             func(v *corev1.VolumeSource) { v.AzureDisk = &corev1.AzureDiskVolumeSource{} },
	"photonPersistentDisk":  func(v *corev1.VolumeSource) { v.PhotonPersistentDisk = &corev1.PhotonPersistentDiskVolumeSource{} },
	"projected":             func(v *corev1.VolumeSource) { v.Projected = &corev1.ProjectedVolumeSource{} },
	"portworxVolume":        func(v *corev1.VolumeSource) { v.PortworxVolume = &corev1.PortworxVolumeSource{} },
	"scaleIO":               func(v *corev1.VolumeSource) { v.ScaleIO = &corev1.ScaleIOVolumeSource{} },
	"storageos":             func(v *corev1.VolumeSource) { v.StorageOS = &corev1.StorageOSVolumeSource{} },
	"csi":                   func(v *corev1.VolumeSource) { v.CSI = &corev1.CSIVolumeSource{} },
	"ephemeral":             func(v *corev1.VolumeSource) { v.Ephemeral = &corev1.EphemeralVolumeSource{} },
	"image":                 func(v *corev1.VolumeSource) { v.Image = &corev1.ImageVolumeSource{} },
}

// project returns the projection of a Pod or pod template (metadata and
// spec) as JSON-shaped data. Values of unexpected types are kept as they
// are, so that decoding the projection reports them.
func project(pod map[string]any) map[string]any {
	out := map[string]any{}
	switch md := pod["metadata"].(type) {
	case map[string]any:
		if a, ok := md["annotations"]; ok {
			out["metadata"] = map[string]any{"annotations": a}
		}
	case nil:
	default:
		out["metadata"] = md
	}
	spec, ok := pod["spec"]
	if !ok {
		return out
	}
	sm, ok := spec.(map[string]any)
	if !ok {
		out["spec"] = spec
		return out
	}
	ps := pick(sm, podSpecKeys)
	if sc, ok := ps["securityContext"].(map[string]any); ok {
		ps["securityContext"] = pick(sc, podSecurityContextKeys)
	}
	if vs, ok := ps["volumes"].([]any); ok {
		out := make([]any, len(vs))
		for i, v := range vs {
			vm, ok := v.(map[string]any)
			if !ok {
				out[i] = v
				continue
			}
			pv := map[string]any{}
			for k, x := range vm {
				if k == "name" {
					pv[k] = x
				} else if volumeSources[k] != nil {
					if _, ok := x.(map[string]any); ok {
						pv[k] = map[string]any{}
					} else {
						pv[k] = x
					}
				}
			}
			out[i] = pv
		}
		ps["volumes"] = out
	}
	for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		cs, ok := ps[list].([]any)
		if !ok {
			continue
		}
		out := make([]any, len(cs))
		for i, c := range cs {
			cm, ok := c.(map[string]any)
			if !ok {
				out[i] = c
				continue
			}
			pc := pick(cm, containerKeys)
			if sc, ok := pc["securityContext"].(map[string]any); ok {
				pc["securityContext"] = pick(sc, securityContextKeys)
			}
			if ports, ok := pc["ports"].([]any); ok {
				pp := make([]any, len(ports))
				for j, p := range ports {
					if pm, ok := p.(map[string]any); ok {
						pp[j] = pick(pm, portKeys)
					} else {
						pp[j] = p
					}
				}
				pc["ports"] = pp
			}
			for _, k := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
				if pm, ok := pc[k].(map[string]any); ok {
					pc[k] = projectHandler(pm)
				}
			}
			if lm, ok := pc["lifecycle"].(map[string]any); ok {
				pl := pick(lm, lifecycleKeys)
				for _, k := range lifecycleKeys {
					if hm, ok := pl[k].(map[string]any); ok {
						pl[k] = projectHandler(hm)
					}
				}
				pc["lifecycle"] = pl
			}
			out[i] = pc
		}
		ps[list] = out
	}
	out["spec"] = ps
	return out
}

func projectHandler(m map[string]any) map[string]any {
	h := pick(m, probeKeys)
	for _, k := range probeKeys {
		if am, ok := h[k].(map[string]any); ok {
			h[k] = pick(am, hostKeys)
		}
	}
	return h
}

func pick(m map[string]any, keys []string) map[string]any {
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// decodeProjected decodes the projection of a Pod or pod template into
// meta and spec: fast, or through the JSON decoder.
func decodeProjected(pod map[string]any, meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
	if err := fastDecode(pod, meta, spec); err == nil {
		return nil
	}
	*meta, *spec = metav1.ObjectMeta{}, corev1.PodSpec{}
	var t corev1.PodTemplateSpec
	if err := decode(project(pod), &t); err != nil {
		return err
	}
	*meta, *spec = t.ObjectMeta, t.Spec
	return nil
}

// fastDecode decodes the projection of pod into meta and spec, or fails
// with errSlow on a value it does not expect.
func fastDecode(pod map[string]any, meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
	switch md := pod["metadata"].(type) {
	case nil:
	case map[string]any:
		switch a := md["annotations"].(type) {
		case nil:
		case map[string]any:
			meta.Annotations = make(map[string]string, len(a))
			for k, v := range a {
				s, ok := v.(string)
				if !ok {
					return errSlow
				}
				meta.Annotations[k] = s
			}
		default:
			return errSlow
		}
	default:
		return errSlow
	}
	var s map[string]any
	switch v := pod["spec"].(type) {
	case nil:
		return nil
	case map[string]any:
		s = v
	default:
		return errSlow
	}
	var ok bool
	if spec.HostNetwork, ok = boolVal(s["hostNetwork"]); !ok {
		return errSlow
	}
	if spec.HostPID, ok = boolVal(s["hostPID"]); !ok {
		return errSlow
	}
	if spec.HostIPC, ok = boolVal(s["hostIPC"]); !ok {
		return errSlow
	}
	if spec.HostUsers, ok = boolPtr(s["hostUsers"]); !ok {
		return errSlow
	}
	if spec.RuntimeClassName, ok = stringPtr(s["runtimeClassName"]); !ok {
		return errSlow
	}
	switch os := s["os"].(type) {
	case nil:
	case map[string]any:
		name, ok := stringVal(os["name"])
		if !ok {
			return errSlow
		}
		spec.OS = &corev1.PodOS{Name: corev1.OSName(name)}
	default:
		return errSlow
	}
	switch sc := s["securityContext"].(type) {
	case nil:
	case map[string]any:
		psc := &corev1.PodSecurityContext{}
		if err := decodePodSecurityContext(sc, psc); err != nil {
			return err
		}
		spec.SecurityContext = psc
	default:
		return errSlow
	}
	if err := decodeVolumes(s["volumes"], &spec.Volumes); err != nil {
		return err
	}
	var err error
	if spec.Containers, err = decodeContainers(s["containers"]); err != nil {
		return err
	}
	if spec.InitContainers, err = decodeContainers(s["initContainers"]); err != nil {
		return err
	}
	switch l := s["ephemeralContainers"].(type) {
	case nil:
	case []any:
		cs, err := decodeContainers(l)
		if err != nil {
			return err
		}
		spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(cs))
		for i := range cs {
			spec.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(cs[i])
		}
	default:
		return errSlow
	}
	return nil
}

func decodePodSecurityContext(m map[string]any, sc *corev1.PodSecurityContext) error {
	var ok bool
	if sc.RunAsUser, ok = int64Ptr(m["runAsUser"]); !ok {
		return errSlow
	}
	if sc.RunAsNonRoot, ok = boolPtr(m["runAsNonRoot"]); !ok {
		return errSlow
	}
	if sc.SELinuxOptions, ok = seLinuxOptions(m["seLinuxOptions"]); !ok {
		return errSlow
	}
	if sc.WindowsOptions, ok = windowsOptions(m["windowsOptions"]); !ok {
		return errSlow
	}
	if sc.SeccompProfile, ok = seccompProfile(m["seccompProfile"]); !ok {
		return errSlow
	}
	if sc.AppArmorProfile, ok = appArmorProfile(m["appArmorProfile"]); !ok {
		return errSlow
	}
	switch l := m["sysctls"].(type) {
	case nil:
	case []any:
		sc.Sysctls = make([]corev1.Sysctl, len(l))
		for i, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				return errSlow
			}
			name, ok1 := stringVal(em["name"])
			value, ok2 := stringVal(em["value"])
			if !ok1 || !ok2 {
				return errSlow
			}
			sc.Sysctls[i] = corev1.Sysctl{Name: name, Value: value}
		}
	default:
		return errSlow
	}
	return nil
}

func decodeSecurityContext(m map[string]any) (*corev1.SecurityContext, error) {
	sc := &corev1.SecurityContext{}
	var ok bool
	if sc.Privileged, ok = boolPtr(m["privileged"]); !ok {
		return nil, errSlow
	}
	if sc.AllowPrivilegeEscalation, ok = boolPtr(m["allowPrivilegeEscalation"]); !ok {
		return nil, errSlow
	}
	switch c := m["capabilities"].(type) {
	case nil:
	case map[string]any:
		caps := &corev1.Capabilities{}
		if caps.Add, ok = capabilities(c["add"]); !ok {
			return nil, errSlow
		}
		if caps.Drop, ok = capabilities(c["drop"]); !ok {
			return nil, errSlow
		}
		sc.Capabilities = caps
	default:
		return nil, errSlow
	}
	pm, ok := stringPtr(m["procMount"])
	if !ok {
		return nil, errSlow
	}
	if pm != nil {
		t := corev1.ProcMountType(*pm)
		sc.ProcMount = &t
	}
	if sc.RunAsUser, ok = int64Ptr(m["runAsUser"]); !ok {
		return nil, errSlow
	}
	if sc.RunAsNonRoot, ok = boolPtr(m["runAsNonRoot"]); !ok {
		return nil, errSlow
	}
	if sc.SELinuxOptions, ok = seLinuxOptions(m["seLinuxOptions"]); !ok {
		return nil, errSlow
	}
	if sc.WindowsOptions, ok = windowsOptions(m["windowsOptions"]); !ok {
		return nil, errSlow
	}
	if sc.SeccompProfile, ok = seccompProfile(m["seccompProfile"]); !ok {
		return nil, errSlow
	}
	if sc.AppArmorProfile, ok = appArmorProfile(m["appArmorProfile"]); !ok {
		return nil, errSlow
	}
	return sc, nil
}

func decodeVolumes(v any, out *[]corev1.Volume) error {
	switch l := v.(type) {
	case nil:
		return nil
	case []any:
		vols := make([]corev1.Volume, len(l))
		for i, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				return errSlow
			}
			for k, x := range em {
				if k == "name" {
					if vols[i].Name, ok = stringVal(x); !ok {
						return errSlow
					}
					continue
				}
				set := volumeSources[k]
				if set == nil {
					continue
				}
				switch x.(type) {
				case nil:
				case map[string]any:
					set(&vols[i].VolumeSource)
				default:
					return errSlow
				}
			}
		}
		*out = vols
		return nil
	}
	return errSlow
}

func decodeContainers(v any) ([]corev1.Container, error) {
	switch l := v.(type) {
	case nil:
		return nil, nil
	case []any:
		cs := make([]corev1.Container, len(l))
		for i, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				return nil, errSlow
			}
			c := &cs[i]
			if c.Name, ok = stringVal(em["name"]); !ok {
				return nil, errSlow
			}
			if c.Image, ok = stringVal(em["image"]); !ok {
				return nil, errSlow
			}
			switch sc := em["securityContext"].(type) {
			case nil:
			case map[string]any:
				s, err := decodeSecurityContext(sc)
				if err != nil {
					return nil, err
				}
				c.SecurityContext = s
			default:
				return nil, errSlow
			}
			switch ports := em["ports"].(type) {
			case nil:
			case []any:
				c.Ports = make([]corev1.ContainerPort, len(ports))
				for j, p := range ports {
					pm, ok := p.(map[string]any)
					if !ok {
						return nil, errSlow
					}
					if c.Ports[j].HostPort, ok = int32Val(pm["hostPort"]); !ok {
						return nil, errSlow
					}
				}
			default:
				return nil, errSlow
			}
			if c.LivenessProbe, ok = probe(em["livenessProbe"]); !ok {
				return nil, errSlow
			}
			if c.ReadinessProbe, ok = probe(em["readinessProbe"]); !ok {
				return nil, errSlow
			}
			if c.StartupProbe, ok = probe(em["startupProbe"]); !ok {
				return nil, errSlow
			}
			switch lm := em["lifecycle"].(type) {
			case nil:
			case map[string]any:
				lc := &corev1.Lifecycle{}
				if lc.PostStart, ok = handler(lm["postStart"]); !ok {
					return nil, errSlow
				}
				if lc.PreStop, ok = handler(lm["preStop"]); !ok {
					return nil, errSlow
				}
				c.Lifecycle = lc
			default:
				return nil, errSlow
			}
		}
		return cs, nil
	}
	return nil, errSlow
}

func probe(v any) (*corev1.Probe, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		p := &corev1.Probe{}
		var ok bool
		if p.HTTPGet, p.TCPSocket, ok = hostActions(m); !ok {
			return nil, false
		}
		return p, true
	}
	return nil, false
}

func handler(v any) (*corev1.LifecycleHandler, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		h := &corev1.LifecycleHandler{}
		var ok bool
		if h.HTTPGet, h.TCPSocket, ok = hostActions(m); !ok {
			return nil, false
		}
		return h, true
	}
	return nil, false
}

func hostActions(m map[string]any) (*corev1.HTTPGetAction, *corev1.TCPSocketAction, bool) {
	var httpGet *corev1.HTTPGetAction
	var tcp *corev1.TCPSocketAction
	switch a := m["httpGet"].(type) {
	case nil:
	case map[string]any:
		host, ok := stringVal(a["host"])
		if !ok {
			return nil, nil, false
		}
		httpGet = &corev1.HTTPGetAction{Host: host}
	default:
		return nil, nil, false
	}
	switch a := m["tcpSocket"].(type) {
	case nil:
	case map[string]any:
		host, ok := stringVal(a["host"])
		if !ok {
			return nil, nil, false
		}
		tcp = &corev1.TCPSocketAction{Host: host}
	default:
		return nil, nil, false
	}
	return httpGet, tcp, true
}

func seLinuxOptions(v any) (*corev1.SELinuxOptions, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		o := &corev1.SELinuxOptions{}
		var ok1, ok2, ok3, ok4 bool
		o.User, ok1 = stringVal(m["user"])
		o.Role, ok2 = stringVal(m["role"])
		o.Type, ok3 = stringVal(m["type"])
		o.Level, ok4 = stringVal(m["level"])
		return o, ok1 && ok2 && ok3 && ok4
	}
	return nil, false
}

func windowsOptions(v any) (*corev1.WindowsSecurityContextOptions, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		o := &corev1.WindowsSecurityContextOptions{}
		var ok1, ok2, ok3, ok4 bool
		o.GMSACredentialSpecName, ok1 = stringPtr(m["gmsaCredentialSpecName"])
		o.GMSACredentialSpec, ok2 = stringPtr(m["gmsaCredentialSpec"])
		o.RunAsUserName, ok3 = stringPtr(m["runAsUserName"])
		o.HostProcess, ok4 = boolPtr(m["hostProcess"])
		return o, ok1 && ok2 && ok3 && ok4
	}
	return nil, false
}

func seccompProfile(v any) (*corev1.SeccompProfile, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		t, ok1 := stringVal(m["type"])
		lp, ok2 := stringPtr(m["localhostProfile"])
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileType(t), LocalhostProfile: lp}, ok1 && ok2
	}
	return nil, false
}

func appArmorProfile(v any) (*corev1.AppArmorProfile, bool) {
	switch m := v.(type) {
	case nil:
		return nil, true
	case map[string]any:
		t, ok1 := stringVal(m["type"])
		lp, ok2 := stringPtr(m["localhostProfile"])
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileType(t), LocalhostProfile: lp}, ok1 && ok2
	}
	return nil, false
}

func capabilities(v any) ([]corev1.Capability, bool) {
	switch l := v.(type) {
	case nil:
		return nil, true
	case []any:
		out := make([]corev1.Capability, len(l))
		for i, e := range l {
			s, ok := stringVal(e)
			if !ok {
				return nil, false
			}
			out[i] = corev1.Capability(s)
		}
		return out, true
	}
	return nil, false
}

// Scalars: JSON null leaves the zero value (nil for a pointer); anything
// but the expected type (and, for integers, an int64 in range) is left to
// the JSON decoder.

func boolVal(v any) (bool, bool) {
	switch b := v.(type) {
	case nil:
		return false, true
	case bool:
		return b, true
	}
	return false, false
}

func boolPtr(v any) (*bool, bool) {
	switch b := v.(type) {
	case nil:
		return nil, true
	case bool:
		return &b, true
	}
	return nil, false
}

func stringVal(v any) (string, bool) {
	switch s := v.(type) {
	case nil:
		return "", true
	case string:
		return s, true
	}
	return "", false
}

func stringPtr(v any) (*string, bool) {
	switch s := v.(type) {
	case nil:
		return nil, true
	case string:
		return &s, true
	}
	return nil, false
}

func int64Ptr(v any) (*int64, bool) {
	switch i := v.(type) {
	case nil:
		return nil, true
	case int64:
		return &i, true
	}
	return nil, false
}

func int32Val(v any) (int32, bool) {
	switch i := v.(type) {
	case nil:
		return 0, true
	case int64:
		if i < math.MinInt32 || i > math.MaxInt32 {
			return 0, false
		}
		return int32(i), true
	}
	return 0, false
}
