// The job browser's and job page's script: "select all" on a page of
// jobs, and a confirmation before deleting or cancelling. The pages work
// without it (the forms post; the answer lists what was done).
(function () {
  "use strict";

  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("#bulk input[name=id]").forEach(function (box) {
        box.checked = all.checked;
      });
    });
  }

  document.addEventListener("submit", function (ev) {
    var button = ev.submitter;
    if (!button || button.name !== "action") {
      return;
    }
    var matching = ev.target.querySelector("input[name=matching]:checked");
    var n = ev.target.querySelectorAll("input[name=id]:checked, input[type=hidden][name=id]").length;
    if (n === 0 && !matching) {
      ev.preventDefault();
      window.alert("Select the jobs to act on first.");
      return;
    }
    var what = button.value === "delete" ? "Delete" : button.value === "cancel" ? "Cancel" : "";
    var which = matching ? "every job the filter matches (the first 1,000)" : n === 1 ? "this job" : n + " jobs";
    if (what && !window.confirm(what + " " + which + "?")) {
      ev.preventDefault();
    }
  });
}());
