/* The job-step table (server/jobs.h): tenant keys that tell steps, users
 * and remote clients apart and name the step back, registration rules and
 * removal of one step or a whole job. */
#include "sl_test.h"

#include "jobs.h"
#include "tenants.h"

#include <stdio.h>
#include <string.h>

static void tenant_keys_name_their_step(void **state)
{
    (void) state;
    char name[48];
    const struct {
        uint32_t job, step;
        const char *want;
    } cases[] = {
        {1, 0, "job 1.0"},
        {4294967295u, 7, "job 4294967295.7"},
        {12, 0xfffffffbu, "job 12.4294967291"}, /* Slurm's batch step */
        {12, 0xfffffffcu, "job 12.4294967292"}, /* its extern step */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t key = sl_job_tenant(cases[i].job, cases[i].step);
        assert_true(sl_job_tenant_name(key, name, sizeof name));
        assert_string_equal(name, cases[i].want);
        sl_tenant_name(key, name, sizeof name); /* what status shows as the owner */
        assert_string_equal(name, cases[i].want);
    }
    /* apart from each other and from every user's and the remote key */
    assert_int_not_equal(sl_job_tenant(1, 0), sl_job_tenant(1, 1));
    assert_int_not_equal(sl_job_tenant(1, 0), sl_job_tenant(0, 1));
    assert_int_not_equal(sl_job_tenant(12, 0xfffffffbu), sl_job_tenant(12, 0xfffffffcu));
    assert_true(sl_job_tenant_of_job(sl_job_tenant(12, 0xfffffffbu), 12));
    assert_true(sl_job_tenant_of_job(sl_job_tenant(4294967295u, 7), 4294967295u));
    assert_false(sl_job_tenant_of_job(sl_job_tenant(12, 0), 13));
    sl_peer user = {.has_uid = true, .uid = UINT32_MAX}, remote = {.has_uid = false};
    assert_false(sl_job_tenant_name(sl_tenant_key(&user), name, sizeof name));
    assert_false(sl_job_tenant_name(sl_tenant_key(&remote), name, sizeof name));
    assert_false(sl_job_tenant_of_job(sl_tenant_key(&user), 0));
}

static void register_replace_and_refuse(void **state)
{
    (void) state;
    sl_jobs jobs = {0};
    sl_job a = {.job_id = 5, .step_id = 0, .uid = 1000, .memory = 1 << 20, .priority = 2};
    assert_sl_ok(sl_jobs_register(&jobs, &a));
    const sl_job *j = sl_jobs_find(&jobs, 5, 0);
    assert_non_null(j);
    assert_int_equal(j->tenant, sl_job_tenant(5, 0));
    assert_ptr_equal(sl_jobs_by_tenant(&jobs, j->tenant), j);
    assert_null(sl_jobs_by_tenant(&jobs, 1001)); /* a uid's key is no step */
    /* registering again replaces the figures; another uid may not take it */
    a.memory = 2 << 20;
    assert_sl_ok(sl_jobs_register(&jobs, &a));
    assert_int_equal(sl_jobs_find(&jobs, 5, 0)->memory, 2 << 20);
    sl_job thief = a;
    thief.uid = 1001;
    assert_sl_err(sl_jobs_register(&jobs, &thief), SL_EINVAL);
    assert_int_equal(sl_jobs_find(&jobs, 5, 0)->uid, 1000);
    sl_jobs_fini(&jobs);
}

static void step_ids_never_alias(void **state)
{
    (void) state;
    /* the highest ordinary id with a key, and the first special one */
    assert_true(sl_job_step_valid(0x7ffffeffu));
    assert_true(sl_job_step_valid(0xffffff00u));
    assert_true(sl_job_step_valid(0xffffffffu));
    /* the ids between have none: each would share a key with another */
    const uint32_t between[] = {0x7fffff00u, 0x80000000u, 0x80000005u, 0xfffffeffu};
    for (size_t i = 0; i < sizeof between / sizeof between[0]; i++) {
        assert_false(sl_job_step_valid(between[i]));
        assert_int_equal(sl_job_tenant(3, between[i]), 0);
    }
    /* every valid step of a job has a key of its own */
    const uint32_t steps[] = {0, 5, 0x7ffffeffu, 0xffffff00u, 0xfffffffbu, 0xffffffffu};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        for (size_t k = i + 1; k < sizeof steps / sizeof steps[0]; k++)
            assert_int_not_equal(sl_job_tenant(3, steps[i]), sl_job_tenant(3, steps[k]));
    /* x + 2^31 is neither registered nor found nor closed as x */
    sl_jobs jobs = {0};
    assert_sl_ok(sl_jobs_register(&jobs, &(sl_job){.job_id = 3, .step_id = 5, .uid = 1000}));
    assert_sl_err(
        sl_jobs_register(&jobs, &(sl_job){.job_id = 3, .step_id = 5u + (1u << 31), .uid = 1000}),
        SL_EINVAL);
    assert_null(sl_jobs_find(&jobs, 3, 5u + (1u << 31)));
    assert_int_equal(sl_jobs_remove(&jobs, 3, 5u + (1u << 31), false), 0);
    assert_non_null(sl_jobs_find(&jobs, 3, 5));
    sl_jobs_fini(&jobs);
}

static void remove_step_or_job(void **state)
{
    (void) state;
    sl_jobs jobs = {0};
    /* more steps than one collection round holds */
    for (uint32_t s = 0; s < 150; s++)
        assert_sl_ok(sl_jobs_register(&jobs, &(sl_job){.job_id = 9, .step_id = s, .uid = 1}));
    assert_sl_ok(sl_jobs_register(&jobs, &(sl_job){.job_id = 10, .step_id = 0, .uid = 1}));
    assert_int_equal(sl_jobs_remove(&jobs, 9, 3, false), 1);
    assert_int_equal(sl_jobs_remove(&jobs, 9, 3, false), 0);
    assert_int_equal(sl_jobs_remove(&jobs, 9, 0, true), 149);
    assert_null(sl_jobs_find(&jobs, 9, 0));
    assert_non_null(sl_jobs_find(&jobs, 10, 0));
    assert_int_equal(jobs.steps.count, 1);
    sl_jobs_fini(&jobs);
}

static void table_is_bounded(void **state)
{
    (void) state;
    sl_jobs jobs = {0};
    for (uint32_t i = 0; i < SL_JOBS_MAX; i++)
        assert_sl_ok(sl_jobs_register(&jobs, &(sl_job){.job_id = i, .uid = 1}));
    assert_sl_err(sl_jobs_register(&jobs, &(sl_job){.job_id = SL_JOBS_MAX, .uid = 1}),
                  SL_EEXHAUSTED);
    /* a registered step may still be updated */
    assert_sl_ok(sl_jobs_register(&jobs, &(sl_job){.job_id = 0, .uid = 1, .priority = 3}));
    sl_jobs_fini(&jobs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tenant_keys_name_their_step),
        cmocka_unit_test(register_replace_and_refuse),
        cmocka_unit_test(step_ids_never_alias),
        cmocka_unit_test(remove_step_or_job),
        cmocka_unit_test(table_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
