"""How the API's lists are paged, with a 400 naming the parameter for a paging value that is not
one (DRF's paginators fall back to their default page size without a word, and answer a bad page
number or cursor with a 404): page-numbered lists (`page`, `page_size`; the default for lists
ordered by name) and newest-first lists paged by an opaque `cursor` (`page_size`)."""

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination, PageNumberPagination
from rest_framework.settings import api_settings

MAX_PAGE_SIZE = 1000


def _whole_number(request, param: str, *, high: int | None = None) -> int | None:
    """The value of `param` as a whole number from 1 (to `high`), None when absent."""
    raw = request.query_params.get(param)
    if raw is None:
        return None
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else 0
    if value < 1 or (high is not None and value > high):
        span = f"from 1 to {high}" if high is not None else "from 1"
        raise ValidationError({param: [f"must be a whole number {span}, not {raw!r}"]})
    return value


class _CheckedPageSize:
    """`?page_size=` from 1 to MAX_PAGE_SIZE; without it the setting REST_FRAMEWORK's PAGE_SIZE."""

    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request):
        return (
            _whole_number(request, self.page_size_query_param, high=self.max_page_size)
            or api_settings.PAGE_SIZE
        )


class Numbered(_CheckedPageSize, PageNumberPagination):
    """`?page=N` (from 1) and `?page_size=`; a page past the last is a 404 that says how many
    there are."""

    last_page_strings = ()  # `?page=last` is no page number either

    def paginate_queryset(self, queryset, request, view=None):
        if _unfiltered(view):
            refuse_unknown_parameters(request, view, getattr(view, "query_parameters", ()))
        number = _whole_number(request, self.page_query_param) or 1
        page_size = self.get_page_size(request)
        paginator = self.django_paginator_class(queryset, page_size)
        if number > max(paginator.num_pages, 1):
            raise NotFound(f"page {number} is past the last page ({paginator.num_pages})")
        self.page = paginator.page(number)
        self.request = request
        if paginator.num_pages > 1 and self.template is not None:
            self.display_page_controls = True
        return list(self.page)


class NewestFirst(_CheckedPageSize, CursorPagination):
    """Newest first, by id; `?cursor=` is what a response's `next` or `previous` link carries."""

    ordering = "-id"

    def paginate_queryset(self, queryset, request, view=None):
        if _unfiltered(view):
            refuse_unknown_parameters(request, view, getattr(view, "query_parameters", ()))
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError(
                {
                    self.cursor_query_param: [
                        "not a cursor of this list: follow the `next` or `previous` link of a "
                        "response, or leave it out for the first page"
                    ]
                }
            ) from None


def paging_parameters(view) -> set[str]:
    """The query parameters the view's paginator reads (none without one)."""
    paginator = getattr(view, "paginator", None)
    names = (
        getattr(paginator, attr, None)
        for attr in ("page_query_param", "page_size_query_param", "cursor_query_param")
    )
    return {name for name in names if name}


def refuse_unknown_parameters(request, view, filters=frozenset()) -> None:
    """A query parameter of a list that is neither one of its `filters`, nor read by its
    paginator, nor DRF's `format` is a 400 naming it: never silently ignored (filters.py's
    backend calls this with the view's filters; a list without filter backends, its paginator,
    with the parameters the view reads itself, its `query_parameters`)."""
    allowed = set(filters) | paging_parameters(view) | {"format"}
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise ValidationError(
            {
                unknown[0]: [
                    "unknown query parameter; this list accepts " + ", ".join(sorted(allowed))
                ]
            }
        )


def _unfiltered(view) -> bool:
    return view is not None and not getattr(view, "filter_backends", None)
