def test_viewer_answers_with_the_tokens_tenant(api):
    data = api.gql("{ viewer { tenantId clientId clientName } }")
    assert data["viewer"] == {"tenantId": str(api.tenant_id), "clientId": str(api.client_id), "clientName": "admin"}
