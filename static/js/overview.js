// The overview refreshes itself every 5 s (hx-trigger on #overview-body), except while the
// jobs filter has the focus: a refresh would replace the field being typed in. (A filter in the
// trigger itself would need eval, which the Content-Security-Policy does not allow.)
document.addEventListener("htmx:beforeRequest", function (event) {
  var source = event.detail.elt;
  var focused = document.activeElement;
  if (source && source.id === "overview-body" && focused && focused.closest("#jobs-filter")) {
    event.preventDefault();
  }
});
