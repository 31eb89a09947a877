package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/client"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

func main() {
	raw, _ := os.ReadFile("engine/testdata/pss/compliant-pod.yaml")
	js, _ := yaml.YAMLToJSON(raw)
	c, err := client.Dial(context.Background(), os.Args[1])
	if err != nil {
		panic(err)
	}
	req := &arbiterv1.DecideRequest{ObjectJson: js}
	d, _ := time.ParseDuration(os.Args[2])
	var lat []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		s := time.Now()
		if _, err := c.Decide(context.Background(), req); err != nil {
			panic(err)
		}
		lat = append(lat, time.Since(s))
	}
	slices.Sort(lat)
	fmt.Println(len(lat), "median", lat[len(lat)/2], "p10", lat[len(lat)/10], "p99", lat[len(lat)*99/100])
}
