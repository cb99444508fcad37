/* json: see json.h. */
#include <math.h>
#include <string.h>

#include "err.h"
#include "json.h"

jv ca_json_get(jv obj, const char *key)
{
	if (jv_get_kind(obj) != JV_KIND_OBJECT)
		return jv_invalid();
	jv v = jv_object_get(jv_copy(obj), jv_string(key));
	return v;
}

jv ca_json_path(jv obj, const char *path)
{
	jv cur = jv_copy(obj);
	const char *p = path;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (jv_get_kind(cur) != JV_KIND_OBJECT) {
			jv_free(cur);
			return jv_null();
		}
		jv next = jv_object_get(cur, jv_string_sized(p, (int)n));
		if (!jv_is_valid(next)) {
			jv_free(next);
			return jv_null();
		}
		cur = next;
		p += n + (dot ? 1 : 0);
		if (!dot)
			break;
	}
	return cur;
}

int ca_json_number(jv obj, const char *key, double *out)
{
	jv v = ca_json_get(obj, key);
	jv_kind kind = jv_get_kind(v);
	int rc;
	if (kind == JV_KIND_INVALID || kind == JV_KIND_NULL) {
		rc = 0;
	} else if (kind == JV_KIND_NUMBER && isfinite(jv_number_value(v))) {
		*out = jv_number_value(v);
		rc = 1;
	} else {
		rc = -1;
	}
	jv_free(v);
	return rc;
}

int ca_json_bool(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	jv_kind kind = jv_get_kind(v);
	jv_free(v);
	return kind == JV_KIND_TRUE ? 1 : kind == JV_KIND_FALSE ? 0 : -1;
}

char *ca_json_strdup(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	char *s = NULL;
	if (jv_get_kind(v) == JV_KIND_STRING)
		s = ca_xstrdup(jv_string_value(v));
	jv_free(v);
	return s;
}

jv ca_json_num_or_null(double x)
{
	return isfinite(x) ? jv_number(x) : jv_null();
}
