import json,sys
pem=lambda f: open(sys.argv[1]+'/'+f).read()
images=["nginx","nginx:1.25","docker.io/nginx","docker.io/library/nginx:latest","index.docker.io/foo/bar:v1",
 "ghcr.io/kyverno/kyverno:v1.19.1","localhost:5000/repo","localhost/repo:tag","registry.example:5000/a/b/c:tag",
 "nginx@sha256:"+"a"*64,"nginx:1.25@sha256:"+"b"*64,"registry.k8s.io/kube-apiserver-arm64:latest@sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2",
 "registry.example:5000/repo@sha256:"+"c"*64,"fictional.registry.example:10443/imagename:my_tag@sha256:"+"f"*64,
 "arm64v8/busybox@sha256:fa8dc70514f29471fe118446e3f84040b19791531ec197836a4f43baf13d744b",
 "corp.reg.com/app:1.0","a","ab","UPPER/case","nginx:","nginx@sha256:abc","nginx@md5:"+"a"*32,"https://gcr.io/foo","foo bar","gcr.io/a..b","[::1]:5000/foo:bar","127.0.0.1:5000/x/y","gcr.io/p/img:"+"t"*129,"",":tag","nginx:tag:tag","nginx@sha256:"+"A"*64]
ex=[]
for i in images:
    s=json.dumps(i)
    ex.append(f"isImage({s})")
    ex.append(f"parseImageReference({s})")
    for m in ["containsDigest","registry","repository","identifier","identifierWithSeparator","tag","digest"]:
        ex.append(f"parseImageReference({s}).{m}()")
ex += ['image("nginx").registry()', 'type(image("nginx"))', 'dyn(image("nginx")) == dyn("nginx")', 'json.marshal(image("nginx"))', 'image("nginx") == parseImageReference("nginx")', 'image("nginx") == image("nginx:latest")',
 'parseImageReference("nginx") == parseImageReference("index.docker.io/library/nginx:latest")',
 'string(parseImageReference("nginx"))', 'type(parseImageReference("nginx")) == type(image("a/b"))',
 '["corp.reg.com/a:1", "docker.io/b"].all(c, image(c).registry() == "corp.reg.com")',
 '["nginx:1", "corp.reg.com/x"].map(e, parseImageReference(e).registry())']
# hash
for f in ["sha1","sha256","md5","hash.sha1","hash.sha256","hash.md5"]:
    for s in ["", "abc", "nginx:latest", "ünïcode"]:
        ex.append(f"{f}({json.dumps(s)})")
ex += ['mylib_version']
# math
ex += ['math.round(1.2345, 2)','math.round(2.5, 0)','math.round(-2.5, 0)','math.round(1234.5678, -2)','math.round(0.1+0.2, 10)','math.round(1.0/3.0, 300)','math.round(-0.0001, 2)']
# json
ex += ['json.unmarshal(\'{"a":1,"b":[1,2,"x"],"c":null,"d":{"e":true}}\')','json.unmarshal("[1, 2.5, -3e2]")','json.unmarshal("bad")','json.unmarshal("")','json.unmarshal(\'"s"\')','json.unmarshal("1").size()',
 'json.unmarshal(\'{"a":1}\').a == 1','type(json.unmarshal(\'{"a":1}\').a)','json.unmarshal(dyn(1))',
 'json.marshal({"b": dyn(1), "a": dyn([dyn(true), dyn(null), dyn(1.5), dyn("s")]), "c": dyn({"x": -2})})','json.marshal(dyn(1))','json.marshal("s<>&")','json.marshal(b"abc")','json.marshal(null)',
 'json.marshal(timestamp("2024-01-02T03:04:05Z"))','json.marshal(duration("1h"))','json.marshal({1: 2})','json.marshal([dyn(1u), dyn(2.0), dyn(-0.0), dyn(1e21), dyn(0.000001)])','json.marshal(double("NaN"))',
 'json.marshal(json.unmarshal(\'{"z":[1,{"y":2}],"a":"b"}\'))','json.marshal(object)','json.marshal([dyn([]), dyn({})])','json.marshal(parseServiceAccount("system:serviceaccount:a:b"))']
# yaml
ex += ['yaml.parse("a: 1\\nb: [x, y]\\nc: {d: true}")','yaml.parse("- 1\\n- 2.5")','yaml.parse(": bad: [")','yaml.parse("")','yaml.parse("x")','yaml.parse("a: 1").a == 1','type(yaml.parse("a: 1").a)','yaml.parse("a: 2024-01-01")','yaml.parse("a: yes")','yaml.parse("a: 0x10")']
# user
ex += ['parseServiceAccount("system:serviceaccount:ns:name").Name','parseServiceAccount("system:serviceaccount:ns:name").Namespace',
 'user.parseServiceAccount("system:serviceaccount:foo:bar:baz").Name','parseServiceAccount("alice").Name == ""','parseServiceAccount("system:serviceaccount:foo").Namespace',
 'parseServiceAccount("system:serviceaccount:ns:name")','has(parseServiceAccount("x").Name)','type(parseServiceAccount("x"))',
 'parseServiceAccount("system:serviceaccount:a:b") == parseServiceAccount("system:serviceaccount:a:b")']
# transform
ex += ['listObjToMap([{"name":"a"},{"name":"b"}], [{"v":1},{"v":2}], "name", "v")','transform.listObjToMap([{"k":"x"}], [{"v":"y"}], "k", "v")',
 'listObjToMap([{"name":"a"}], [], "name", "v")','listObjToMap([{"name":1}], [{"v":1}], "name", "v")','listObjToMap([{"name":"a"}], [{"w":1}], "name", "v")',
 'listObjToMap(json.unmarshal(\'[{"name":"a"}]\'), json.unmarshal(\'[{"v":[1]}]\'), "name", "v")','listObjToMap([dyn(1)], [dyn(2)], "name", "v")']
# gzip
ex += ['gzip.decompress(gzip.compress("hello"))','base64.encode(gzip.compress("hello"))','gzip.decompress(b"notgzip")','gzip.compress(dyn(1))','size(gzip.compress(""))']
# random
ex += ['random().size()','random().matches("^[0-9a-z]{8}$")','random("[a-z]{5}").matches("^[a-z]{5}$")','random("\\\\d")','random("a{2,3}b+c?").matches("^a{2,3}b+c?$")','random.random("x")','random.random().size()','random("(foo|bar)-[0-9]{3}").matches("^(foo|bar)-[0-9]{3}$")','random("^abc$")','random("[")','random("(?i)ab")','random("x{0}")','random("[^\\\\x00-\\\\x{10FFFF}]")']
# time
ex += ['time.toCron(timestamp("2024-03-05T04:05:06Z"))','time.truncate(timestamp("2024-03-05T04:05:06Z"), duration("1h"))','time.truncate(timestamp("2024-03-05T04:35:06Z"), duration("30m"))','type(time.now()) == google.protobuf.Timestamp','time.now() > timestamp("2024-01-01T00:00:00Z")','time.toCron(timestamp("2023-12-31T23:59:00Z"))']
# x509
for f in ["rsa-cert.pem","rsa-csr.pem","ec-cert.pem"]:
    p=pem(f)
    ex.append("x509.decode('''"+p+"''')")
ex += ['x509.decode("not pem")',"x509.decode('''-----BEGIN FOO-----\nYWJj\n-----END FOO-----\n''')","x509.decode('''-----BEGIN CERTIFICATE-----\nYWJj\n-----END CERTIFICATE-----\n''')"]
# context libs with mocks
ex += ['resource.Get("v1","configmaps","ns1","cm")','resource.get("v1","configmaps","ns1","missing")','resource.get("v1","configmaps","ns1","forbidden")','resource.get("v1","configmaps","ns1","boom")',
 'resource.List("v1","configmaps","ns1")','resource.list("v1","configmaps","ns1",{"a":"b"})','resource.list("v1","boom","ns1")',
 'resource.Post("v1","configmaps","ns1",{"a": 1})', 'resource.post("v1","configmaps","ns1",{"a": dyn(1), "b": dyn([dyn(1u), dyn(b"x")])})', 'type(resource.toGVR("v1","Pod"))', 'resource.toGVR("v1","Pod") == resource.toGVR("v1","Pod")','resource.post("v1","configmaps",{"a": "b"})',
 'resource.ToGVR("v1","Pod")','resource.get(resource.ToGVR("v1","Pod"), "ns1", "p")','resource.list(resource.toGVR("v1","Pod"), "ns1")','resource.list(resource.toGVR("v1","Pod"), "ns1", {"x":"y"})','resource.get(resource.toGVR("v1","Pod"), "ns1", "missing")',
 'resource.get("v1","configmaps","cm")','resource.list("v1","configmaps")','resource.get(resource.toGVR("v1","Pod"), "p")','resource.post("v1","configmaps",{"a": "b"}).ns',
 'globalContext.Get("entry","proj")','globalContext.get("entry")','globalContext.get("missing","")','globalContext.get("boom","x")','globalContext.get("missing","") == null',
 'image.GetMetadata("nginx:1")','image.getMetadata("missing")','image.getMetadata("ghcr.io/x:1").manifest.a',
 'http.Get("https://example.com/x")','http.get("https://example.com/x", {"Authorization": "Bearer t"})','http.get("https://fail.example.com")',
 'http.Post("https://example.com/p", {"a": dyn(1), "b": dyn([dyn(1u), dyn(2.5), dyn("s"), dyn(null), dyn(true), dyn(1e21)]), "c": dyn(b"xy"), "d": dyn(timestamp("2024-01-02T03:04:05Z")), "<&>": dyn("<&>")})', 'http.post("https://example.com/p", {"z": 1, "a": 2})', 'http.post("https://example.com/p", {1: 2})','http.post("https://example.com/p", "text", {"H": "v"})','http.post("https://example.com/p", dyn(1))',
 'http.Client("").Get("https://example.com/c")','http.client("bad-pem")','http.get("https://example.com/x").body.url','http.Get("https://example.com/config").body.allowed == true']
ex += ['resource.List("v1","configmaps","ns1").items.map(s, s.metadata.name)','resource.List("v1","configmaps","ns1").items.size()','size(resource.List("v1","configmaps","ns1").items)',
 'dyn(resource.List("v1","configmaps","ns1").items).map(s, s.metadata.name)','resource.List("v1","configmaps","ns1").items[0].metadata.name','has(resource.get("v1","configmaps","ns1","cm").metadata)',
 'resource.get("v1","configmaps","ns1","cm").?metadata.orValue(1)','resource.get("v1","configmaps","ns1","cm") == null','resource.list("v1","configmaps").items.size()',
 'isImage(dyn(1))','parseImageReference(dyn(1))','sha256(dyn(1))','math.round(dyn(1), 2)','math.round(1.5, dyn(1))','time.toCron(dyn(1))','gzip.decompress(dyn("x"))',
 'listObjToMap(dyn(1), [], "a", "b")','resource.get(dyn(1), "a", "b", "c")','http.get(dyn(1))','globalContext.get(dyn(1))','image.getMetadata(dyn(1))',
 'json.unmarshal(dyn(b"{}"))','yaml.parse(dyn(1))','x509.decode(dyn(1))','parseServiceAccount(dyn(1))','random(dyn(1))','http.get("https://x", dyn({"a": 1}))',
 'resource.list("v1","configmaps","ns1", dyn({"a": 1}))','resource.post("v1","configmaps","ns1", dyn({1: 1}))','resource.get("v1","configmaps","ns1", dyn(1))',
 'resource.list("v1","configmaps", dyn({"a": 1}))','json.marshal(http)','json.marshal(json)','string(mylib_version)','type(json)','type(http)']
json.dump(ex, sys.stdout)
