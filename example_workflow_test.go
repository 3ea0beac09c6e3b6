package bunqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// Step is the args of one step of the example's workflow.
type Step struct {
	Name string `json:"name"`
}

// Kind implements bunqueue.JobArgs.
func (Step) Kind() string { return "example_step" }

// A workflow: "fetch" runs first, then the two resizes (at once, on two
// workers), then "publish", which reads what they recorded. The group is
// enqueued in one call, here in the app's transaction: it exists if and
// only if that transaction commits.
func ExampleClient_EnqueueWorkflow() {
	ctx := context.Background()
	db := openExampleDB("bq_example_flow", "id BIGINT PRIMARY KEY")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_flow")
	if err := bunqueue.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	const queue = "example_workflow"
	defer db.Exec("DELETE FROM bunqueue_jobs WHERE queue = ?", queue)

	client, err := bunqueue.NewClient(db, &bunqueue.Config{
		PollInterval: 50 * time.Millisecond,
		JobQueues:    map[string]bunqueue.JobQueueConfig{queue: {Workers: 2}},
	})
	if err != nil {
		log.Fatal(err)
	}
	published := make(chan string)
	err = bunqueue.AddWorker(client, bunqueue.WorkerFunc[Step](
		func(ctx context.Context, db bun.IDB, job *bunqueue.Job[Step]) error {
			outs, err := bunqueue.DependencyOutputs(ctx) // by the dependencies' names
			if err != nil {
				return err
			}
			var got []string
			for name, out := range outs {
				var s string
				if err := json.Unmarshal(out, &s); err != nil {
					return err
				}
				got = append(got, name+"="+s)
			}
			slices.Sort(got)
			if job.Args.Name == "publish" {
				published <- strings.Join(got, " ")
				return nil
			}
			return bunqueue.RecordOutput(ctx, job.Args.Name+" done after ["+strings.Join(got, " ")+"]")
		}))
	if err != nil {
		log.Fatal(err)
	}

	step := func(name string, after ...string) bunqueue.WorkflowJob {
		return bunqueue.WorkflowJob{Name: name, Args: Step{Name: name}, Opts: &bunqueue.EnqueueOpts{Queue: queue},
			DependsOn: bunqueue.After(after...)}
	}
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := client.EnqueueWorkflow(ctx, tx, []bunqueue.WorkflowJob{
			step("fetch"),
			step("resize_small", "fetch"),
			step("resize_large", "fetch"),
			step("publish", "resize_small", "resize_large"),
		}, nil)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.EnqueueWorkflow(ctx, db, []bunqueue.WorkflowJob{step("a", "b"), step("b", "a")}, nil)
	fmt.Println(err)

	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("publish read:", <-published)
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// bunqueue: EnqueueWorkflow: job "a" is in a cycle of dependencies: "a" -> "b" -> "a"
	// publish read: resize_large=resize_large done after [fetch=fetch done after []] resize_small=resize_small done after [fetch=fetch done after []]
}
