package dashboard_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	_ "github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// requireAdmin stands for the app's own authentication.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "admin" || pass != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="bunqueue"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The dashboard mounted under /bunqueue/ of the app's server, behind the
// app's authentication, with the Retry and Delete buttons on.
func Example() {
	var db *bun.DB // the app's
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", requireAdmin(http.StripPrefix("/bunqueue",
		dashboard.New(client, &dashboard.Options{AllowActions: true}))))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// The dashboard under a path prefix of the app's mux, here served by an
// httptest server: the page, and the same data as JSON at data.json.
func ExampleNew() {
	type Order struct {
		bun.BaseModel `bun:"table:bq_example_dashboard"`
		ID            int64 `bun:",pk"`
		Shipped       bool
	}
	db := openExampleDB("bq_example_dashboard", "id BIGINT PRIMARY KEY, shipped BOOL NOT NULL DEFAULT FALSE, INDEX (shipped, id)")
	defer db.Close()
	defer db.Exec("DROP TABLE bq_example_dashboard")
	if _, err := db.Exec("INSERT INTO bq_example_dashboard (id) VALUES (1), (2)"); err != nil {
		log.Fatal(err)
	}
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	orders := bunqueue.NewQueue("bq_example_orders",
		func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("shipped = FALSE").Order("id") },
		func(ctx context.Context, tx bun.Tx, o *Order) error {
			_, err := tx.NewUpdate().Model(o).Set("shipped = TRUE").WherePK().Exec(ctx)
			return err
		}, nil)
	if err := client.Add(orders); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/admin/queues/", http.StripPrefix("/admin/queues",
		dashboard.New(client, &dashboard.Options{Title: "Shop queues"})))
	server := httptest.NewServer(mux)
	defer server.Close()

	res, err := http.Get(server.URL + "/admin/queues/")
	if err != nil {
		log.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.Status, res.Header.Get("Content-Type"))
	for line := range strings.Lines(string(page)) {
		if strings.HasPrefix(line, "<title>") { // the page's, not its charts'

			fmt.Println(strings.TrimSpace(line))
		}
	}

	res, err = http.Get(server.URL + "/admin/queues/data.json")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	var data dashboard.Data
	if err := json.NewDecoder(res.Body).Decode(&data); err != nil {
		log.Fatal(err)
	}
	for _, q := range data.Queues {
		fmt.Printf("%s over %s: %d waiting\n", q.Name, q.Table, q.Depth)
	}
	// Output:
	// 200 OK text/html; charset=utf-8
	// <title>Shop queues</title>
	// bq_example_orders over bq_example_dashboard: 2 waiting
}

// openExampleDB opens the examples' database (BUNQUEUE_MYSQL_DSN, or
// MariaDB or MySQL at 127.0.0.1:3306) and (re)creates a table for one
// example; drop it when done.
func openExampleDB(table, columns string) *bun.DB {
	dsn := os.Getenv("BUNQUEUE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
	}
	sqldb, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	db := bun.NewDB(sqldb, mysqldialect.New())
	for _, stmt := range []string{
		"DROP TABLE IF EXISTS " + table,
		"CREATE TABLE " + table + " (" + columns + ") ENGINE=InnoDB",
	} {
		if _, err := db.Exec(stmt); err != nil {
			log.Fatal(err)
		}
	}
	return db
}
